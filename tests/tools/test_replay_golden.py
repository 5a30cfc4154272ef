"""Golden outputs of `fault-agent replay` for the checked-in scenarios (tests/scenarios), and its determinism.

Regenerate after a change meant to change decisions: ``.venv/bin/python tests/scenarios/make_scenarios.py
--expected`` (then review the diff of tests/scenarios/*.expected.jsonl).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from agent.cli import main

SCENARIOS = Path(__file__).parent.parent / "scenarios"
sys.path.insert(0, str(SCENARIOS))
from make_scenarios import REPLAY_ARGS, replay_args, scenario_names  # noqa: E402

NAMES = scenario_names(SCENARIOS)


def test_every_scenario_has_a_golden_output() -> None:
    assert NAMES, "no scenario files"
    for name in NAMES:
        assert (SCENARIOS / f"{name}.expected.jsonl").is_file(), f"{name}: run make_scenarios.py --expected"


@pytest.mark.parametrize("name", NAMES)
def test_replay_matches_golden_output(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", *replay_args(SCENARIOS / f"{name}.yaml")]) == 0
    got = capsys.readouterr().out
    want = (SCENARIOS / f"{name}.expected.jsonl").read_text(encoding="utf-8")
    assert got == want, f"{name}: replay output changed (regenerate with make_scenarios.py --expected if meant)"
    for line in got.splitlines():  # the documented line shape
        obj = orjson.loads(line)
        assert list(obj) == ["t", "kind", "job", "action", "reason", "event_type"]
        assert obj["kind"] in ("decision", "write", "event")
        assert obj["t"].endswith("Z")


def _run(args: list[str], env: dict[str, str]) -> bytes:
    done = subprocess.run(args, capture_output=True, env={**os.environ, **env}, check=False, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def test_replay_is_byte_identical_across_processes_hash_seeds_and_shifted_clocks() -> None:
    """Same input, same bytes: the golden output (made by another process), a process with another hash seed,
    and one with the wall clock 40 days ahead (libfaketime, as CI's shifted unit tier). Fails when faketime is
    missing (it is a system dependency)."""
    faketime = shutil.which("faketime")
    assert faketime is not None, "faketime is missing: install Debian's 'faketime' package"
    path = SCENARIOS / "chip-fault-restart.yaml"
    cmd = [sys.executable, "-m", "agent", "replay", str(path), *REPLAY_ARGS]
    golden = (SCENARIOS / "chip-fault-restart.expected.jsonl").read_bytes()
    assert golden  # not trivially equal
    assert _run(cmd, {"PYTHONHASHSEED": "1"}) == golden
    assert _run([faketime, "-f", "+40d", *cmd], {"PYTHONHASHSEED": "2"}) == golden
