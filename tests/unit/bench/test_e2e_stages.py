"""bench/e2e_stages.py: a bench_e2e ``--dump`` joined to the agent's ``fault stages`` lines, and bench_e2e's
``--agent-setting`` values."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from support.bench_scripts import load_bench_script

AT = 1_796_518_000.0  # a fault's PUT, wall-clock seconds (any value: only differences are read)


@pytest.fixture(scope="module")
def stages() -> ModuleType:
    return load_bench_script("e2e_stages.py", "_e2e_stages_under_test")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench_script("bench_e2e.py", "_bench_e2e_settings_under_test")


def fault(job: str, at: float) -> dict[str, object]:
    return {"job": job, "at": at, "watch": 10.0, "reflex": 30.0, "action": 80.0, "kafka": 40.0, "reflex_kafka": 25.0}


def line(incident: str, seen_at: float, **ms: float) -> str:
    rec = {"incident": incident, "seen_at": seen_at, **{f"{k}_ms": v for k, v in ms.items()}, "event": "fault stages"}
    return json.dumps(rec)


def test_a_stage_line_joins_its_jobs_last_fault_before_it_and_gives_each_stage(
    stages: ModuleType, tmp_path: Path
) -> None:
    log = tmp_path / "agent.log"
    log.write_text(
        "\n".join(
            [
                '{"event": "something else", "seen_at": 1}',
                "not json",
                line("e2e-1-abc", AT + 0.012, decided=2.0, durable=12.0, sent=12.5, answered=40.0),
                line("e2e-10-def", AT + 0.215, decided=1.0),  # the other job's fault, 0.2 s later
                line("e2e-1-old", AT - 100.0, decided=1.0),  # an earlier run's line: no fault before it in reach
            ]
        )
    )
    faults = [fault("e2e-1", AT), fault("e2e-10", AT + 0.2), fault("e2e-1", AT + 0.4)]
    pairs = stages.join(faults, stages.stage_lines(log))
    assert [(f["job"], f["at"]) for f, _ in pairs] == [("e2e-1", AT), ("e2e-10", AT + 0.2)]
    rows = stages.rows(pairs[:1])
    assert rows["agent read"] == [pytest.approx(12.0, abs=0.01)]
    assert rows["read → decided"] == [2.0]
    assert rows["decided → durable"] == [10.0]
    assert rows["durable → sent"] == [0.5]
    assert rows["sent → answered"] == [27.5]
    assert rows["sent → first pod terminating"] == [pytest.approx(80.0 - 12.0 - 12.5, abs=0.01)]
    assert rows["action − reflex"] == [50.0]
    assert rows["durable → fault.detected in kafka"] == [pytest.approx(40.0 - 12.0 - 12.0, abs=0.01)]
    assert rows["kafka − reflex producer"] == [15.0]
    assert "decided → durable" not in stages.rows(pairs[1:])  # a stage not reached is left out


def test_agent_settings_are_key_value_pairs_without_the_prefix(bench: ModuleType) -> None:
    assert bench._settings(["LOG__LEVEL=debug", "FAULT_AGENT_KAFKA__LINGER_MS=0"]) == {
        "LOG__LEVEL": "debug",
        "KAFKA__LINGER_MS": "0",
    }
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        bench._settings(["LOG__LEVEL"])


def test_the_decision_paths_cpu_and_preemptions_are_rows_and_the_share_preempted_is_printed(
    stages: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = {"path_cpu_ms": 1.4, "path_preempted": 0}
    log = tmp_path / "agent.log"
    lines = [
        {"incident": "e2e-1-a", "seen_at": AT + 0.01, "decided_ms": 2.0, **path, "event": "fault stages"},
        {"incident": "e2e-2-b", "seen_at": AT + 0.21, "decided_ms": 30.0, "path_cpu_ms": 1.6, "path_preempted": 3,
         "event": "fault stages"},
        {"incident": "e2e-3-c", "seen_at": AT + 0.41, "decided_ms": 1.0, "event": "fault stages"},  # decided again
    ]  # fmt: skip
    log.write_text("\n".join(json.dumps(x) for x in lines))
    dump = tmp_path / "dump.jsonl"
    dump.write_text("\n".join(json.dumps(fault(f"e2e-{n}", AT + 0.2 * (n - 1))) for n in (1, 2, 3)))
    rows = stages.rows(stages.join([json.loads(x) for x in dump.read_text().splitlines()], stages.stage_lines(log)))
    assert rows["decision path CPU"] == [1.4, 1.6]
    assert rows["decision path preempted"] == [0, 3]
    assert stages.main([str(dump), str(log)]) == 0
    assert "decision paths preempted at least once: 50% of 2" in capsys.readouterr().out
