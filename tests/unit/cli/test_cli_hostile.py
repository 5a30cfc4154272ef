"""The command line under hostile use (issue 36, item 14): --config in either position, a closed pipe, a YAML list,
Python type names, a dangling symlink, an unquoted timestamp, a breaker trip in --compare. Each test failed on the
code before its fix."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog

from agent.cli import main

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"
SCENARIOS = Path(__file__).parent.parent.parent / "scenarios"
BREAKER = SCENARIOS / "breaker-trips.yaml"
NOW = "2026-01-01T09:00:00Z"
NODED_CM = FIXTURES / "nodeinfo-unhealthy-cpu.json"
EXIT_PIPE = 128 + 13  # as the shell reports a process SIGPIPE ended


def _detect_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """`replay` and `detect` run in this process configure structlog and the root logger for the whole process;
    put back what the tests after these expect (found: test_kube_watch's log assertions saw nothing after them)."""
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def no_breaker(tmp_path: Path) -> Path:
    path = tmp_path / "no-breaker.yaml"
    path.write_text("policy:\n  breaker_min_faulty_nodes: 100\n")
    return path


@pytest.fixture
def per_node(tmp_path: Path) -> Path:
    path = tmp_path / "per-node.yaml"
    path.write_text("kube:\n  fault_source: per-node\n")
    return path


# --- --config before or after the subcommand --------------------------------------------------------------------


def _trips(capsys: pytest.CaptureFixture[str], argv: list[str]) -> int:
    assert main(argv) == 0
    return capsys.readouterr().out.count("io.faultagent.breaker.tripped.v1")


def test_config_before_replay_is_used(capsys: pytest.CaptureFixture[str], no_breaker: Path) -> None:
    """Regression: replay's own --config default (None) overwrote the one given before the subcommand."""
    assert _trips(capsys, ["replay", str(BREAKER)]) == 1  # the defaults trip the breaker on this scenario
    assert _trips(capsys, ["--config", str(no_breaker), "replay", str(BREAKER)]) == 0
    assert _trips(capsys, ["replay", str(BREAKER), "--config", str(no_breaker)]) == 0


def test_config_after_detect_is_accepted(capsys: pytest.CaptureFixture[str], per_node: Path) -> None:
    """Regression: `detect --config X` was refused with the top-level usage."""
    clusterd = str(FIXTURES / "mindcluster" / "clusterd-list.json")
    code, doc = _detect_json(capsys, "detect", "--now", NOW, "--json", "-f", clusterd)
    assert code == 0
    assert len(doc["faults"]) == 5  # kube.fault_source auto: ClusterD's ConfigMaps are there, so they are read
    code, doc = _detect_json(capsys, "detect", "--config", str(per_node), "--now", NOW, "--json", "-f", clusterd)
    assert code == 0
    assert doc["faults"] == []  # per-node: cluster-info-* is not read


def test_the_config_after_the_subcommand_wins(capsys: pytest.CaptureFixture[str], per_node: Path) -> None:
    clusterd = str(FIXTURES / "mindcluster" / "clusterd-list.json")
    after = per_node.with_name("clusterd.yaml")
    after.write_text("kube:\n  fault_source: clusterd\n")
    argv = ["--config", str(per_node), "detect", "--config", str(after), "--now", NOW, "--json", "-f", clusterd]
    code, doc = _detect_json(capsys, *argv)
    assert code == 0
    assert len(doc["faults"]) == 5


# --- a closed pipe ------------------------------------------------------------------------------------------------


class _ClosedAfter:
    """Standard output whose reader leaves after `lines` lines (`… | head -n lines`)."""

    def __init__(self, lines: int) -> None:
        self.left = lines
        self.got: list[str] = []

    def write(self, text: str) -> int:
        if text.count("\n") > self.left:  # more than the reader takes: the write fails
            self.left = 0
            raise BrokenPipeError(32, "Broken pipe")
        self.left -= text.count("\n")
        self.got.append(text)
        return len(text)

    def flush(self) -> None:
        if self.left <= 0:
            raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        raise OSError("no file descriptor")


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["text", "json"])
def test_replay_into_a_closed_pipe_stops_quietly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, extra: list[str]
) -> None:
    """Regression: `replay … | head` logged a 683-line traceback as a failure to handle a fault, and exited 0."""
    fake = _ClosedAfter(1)
    monkeypatch.setattr(sys, "stdout", fake)
    code = main(["replay", str(SCENARIOS / "business-failures-budget-exhausted.yaml"), *extra])
    err = capsys.readouterr().err
    assert code == EXIT_PIPE
    assert "Traceback" not in err
    assert "BrokenPipe" not in err
    assert err == ""
    assert len(fake.got) == 1


def test_compare_into_a_closed_pipe_stops_quietly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_breaker: Path
) -> None:
    monkeypatch.setattr(sys, "stdout", _ClosedAfter(1))
    code = main(["replay", str(BREAKER), "--compare", str(no_breaker)])
    assert code == EXIT_PIPE
    assert "Traceback" not in capsys.readouterr().err


# --- detect: lists, type names, symlinks, timestamps -------------------------------------------------------------


def test_a_yaml_list_of_configmaps_is_read_item_by_item(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Regression: a YAML sequence of ConfigMaps read as '0 fault(s)' (one rejection naming Python's 'list')."""
    cm = json.loads(NODED_CM.read_text())
    path = tmp_path / "cms.yaml"
    path.write_text(json.dumps([cm]))  # JSON is YAML; a list at the top
    code, doc = _detect_json(capsys, "detect", "--now", NOW, "--json", "-f", str(path))
    assert code == 0
    assert [(f["kind"], f["node"]) for f in doc["faults"]] == [("node", "worker-05")]
    assert doc["rejections"] == []


@pytest.mark.parametrize(
    ("text", "words"),
    [
        pytest.param("- 1\n", "an integer is not a Kubernetes object", id="integer"),
        pytest.param("just text\n", "a string is not a Kubernetes object", id="string"),
    ],
)
def test_messages_use_json_type_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, words: str
) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    _, doc = _detect_json(capsys, "detect", "--now", NOW, "--json", "-f", str(path))
    [rej] = doc["rejections"]
    assert words in rej["detail"]


def test_detector_messages_use_json_type_names(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cm = {"kind": "ConfigMap", "metadata": {"name": "mindx-dl-deviceinfo-w1", "namespace": "kube-system"}}
    cm["data"] = {"DeviceInfoCfg": '{"DeviceInfo":{"DeviceList":[],"UpdateTime":null},"CheckCode":{}}'}
    path = tmp_path / "x.json"
    path.write_text(json.dumps(cm))
    _, doc = _detect_json(capsys, "detect", "--now", NOW, "--json", "-f", str(path))
    details = " ".join(r["detail"] for r in doc["rejections"])
    for python_name in ("list", "dict", "NoneType", "str"):
        assert f"got {python_name}" not in details
    path.write_text(json.dumps({**cm, "data": {"DeviceInfoCfg": "[]"}}))
    _, doc = _detect_json(capsys, "detect", "--now", NOW, "--json", "-f", str(path))
    assert [r["detail"] for r in doc["rejections"]] == ["DeviceInfoCfg: expected object, got array"]


def test_a_dangling_symlink_in_a_directory_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Regression: a symbolic link to a missing file in `-f DIR` was skipped without a word."""
    (tmp_path / "good.json").write_text(NODED_CM.read_text())
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "missing.yaml")
    code = main(["detect", "--now", NOW, "--json", "-f", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 2
    assert len(doc["faults"]) == 1
    [rej] = doc["rejections"]
    assert rej["source"] == str(tmp_path / "gone.yaml")
    assert rej["reason"] == "unreadable-file"
    assert "symbolic link" in rej["detail"]
    assert "missing.yaml" in rej["detail"]


def test_an_unquoted_timestamp_says_to_quote_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Regression: YAML reads an unquoted time as a timestamp; the rejection did not say to quote it."""
    cm = json.loads(NODED_CM.read_text())
    lines = [
        "kind: ConfigMap",
        "metadata: {name: mindx-dl-nodeinfo-worker-05, namespace: mindx-dl}",
        "data:",
        f"  NodeInfo: '{cm['data']['NodeInfo']}'",
        "  updateTime: 2026-01-01T08:00:05+08:00",
    ]
    path = tmp_path / "cm.yaml"
    path.write_text("\n".join(lines) + "\n")
    code, doc = _detect_json(capsys, "detect", "--now", NOW, "--json", "-f", str(path))
    assert code == 0
    [rej] = doc["rejections"]
    assert rej["reason"] == "wrong-type"
    assert 'quote it: updateTime: "2026-01-01T08:00:05+08:00"' in rej["detail"]
    path.write_text("\n".join(lines[:-1]) + '\n  updateTime: "2026-01-01T08:00:05+08:00"\n')
    code, doc = _detect_json(capsys, "detect", "--now", NOW, "--json", "-f", str(path))
    assert (code, len(doc["faults"]), doc["rejections"]) == (0, 1, [])


# --- --compare shows a breaker trip ------------------------------------------------------------------------------


def test_compare_shows_the_side_whose_breaker_tripped(capsys: pytest.CaptureFixture[str], no_breaker: Path) -> None:
    """Regression: with the breaker open the agent still decides (but does not act), so both sides' decisions were
    alike and the comparison showed no difference at all."""
    assert main(["replay", str(BREAKER), "--compare", str(no_breaker)]) == 0
    text = capsys.readouterr().out
    assert "A: the breaker tripped at 2026-01-01T00:00:05.400Z; decisions after it were not acted on" in text
    assert "B: the breaker tripped" not in text
    assert main(["replay", str(BREAKER), "--compare", str(no_breaker), "--json"]) == 0
    last = orjson.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["totals"]["a"]["breaker_trips"] == 1
    assert last["totals"]["b"]["breaker_trips"] == 0
    assert last["breaker_tripped"] == {"a": ["2026-01-01T00:00:05.400Z"], "b": []}


# --- deep nesting in replay's and lint's inputs -------------------------------------------------------------------


def test_a_recording_line_nested_too_deep_is_skipped_and_the_rest_replayed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Regression: a recorded object 1,000 levels deep stopped the replay with a traceback (its encoder's recursion)."""
    from agent.replay.records import dumps_record, scenario_records
    from agent.replay.scenario import load_scenario

    steps = load_scenario((SCENARIOS / "noded-separate-fault.yaml").read_text())
    lines = []
    for n, rec in enumerate(scenario_records(steps, start_ms=1767225600000, filename="x")):
        doc = orjson.loads(dumps_record(rec))
        if n == 0:
            doc["object"]["spec"] = "DEEP"
        lines.append(json.dumps(doc).replace('"DEEP"', "[" * 1000 + "]" * 1000))
    path = tmp_path / "rec.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert main(["replay", str(path)]) == 1  # done, one line skipped
    out = capsys.readouterr()
    assert f"{path}:1: the object is nested more than 64 levels deep" in out.err
    assert "Traceback" not in out.err
    assert "decision" in out.out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["lint"], "a document is nested more than 64 levels deep [too-deep]", id="lint"),
        pytest.param(["replay"], "not valid YAML: nested more than 64 levels deep", id="replay-scenario"),
        pytest.param(["submit", "-f"], "line 1, column 67: nested more than 64 levels deep", id="submit"),
    ],
)
def test_lint_replay_and_submit_refuse_deep_yaml(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], words: str
) -> None:
    """Regression: 2 KB of nested flow sequences gave a RecursionError traceback from PyYAML."""
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 1000 + "]" * 1000 + "\n")
    code = main([*argv, str(path)])
    out = capsys.readouterr()
    assert code in (1, 2)
    assert words in out.out + out.err
    assert "Traceback" not in out.err


def test_a_settings_file_nested_too_deep_stops_with_a_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Regression: `--config` of 2 KB of nested lists raised RecursionError out of the command line."""
    deep = tmp_path / "deep.yaml"
    deep.write_text("policy: " + "[" * 1000 + "]" * 1000 + "\n")
    assert main(["--config", str(deep), "detect", "-f", str(NODED_CM)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fault-agent detect: stopped at Python's recursion limit: an input nested too deep")


def test_a_fault_config_file_nested_too_deep_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Regression: a faultCode.json 300 levels deep stopped detect in orjson's encoder (Recursion limit reached)."""
    path = tmp_path / "faultCode.json"
    path.write_text('{"a":' + "[" * 300 + "]" * 300 + "}")
    assert main(["detect", "--fault-config", str(path), "-f", str(NODED_CM)]) == 2
    assert capsys.readouterr().err == f"fault-agent detect: {path}: nested more than 64 levels deep\n"
