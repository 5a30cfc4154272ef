"""Scenario files (agent.replay.scenario): loading with precise errors, the schema copy, export from a recording."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent.cli import main
from agent.replay.scenario import (
    SCHEMA,
    ScenarioError,
    dump_scenario,
    export_scenario,
    load_scenario,
    parse_duration,
)

GOOD = """\
- at: 0s
  apply:
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: cm1, namespace: kube-system}
    data: {a: "1"}
- at: 1.5s
  patch: {resource: nodes, name: n1, patch: {metadata: {labels: {x: "y"}}}}
- at: 1500ms
  delete: {resource: pods, namespace: train, name: p0}
- at: 2
  apply: {apiVersion: batch.volcano.sh/v1alpha1, kind: Job, metadata: {name: j, namespace: train}}
"""


def test_good_file_loads() -> None:
    steps = load_scenario(GOOD)
    assert [(s.at_s, s.op, s.kind.resource, s.namespace, s.name, s.line) for s in steps] == [
        (0.0, "apply", "configmaps", "kube-system", "cm1", 1),
        (1.5, "patch", "nodes", None, "n1", 7),
        (1.5, "delete", "pods", "train", "p0", 9),
        (2.0, "apply", "vcjobs", "train", "j", 11),
    ]
    assert steps[1].body == {"metadata": {"labels": {"x": "y"}}}


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("1.5s", 1.5), ("200ms", 0.2), ("2m", 120.0), ("1h", 3600.0), (3, 3.0), (0.25, 0.25)],
)
def test_parse_duration(value: Any, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("- at: 1s\n  apply: [a\n- at: 2s\n", "s.yaml:3: not valid YAML", id="yaml"),
        pytest.param("at: 1s\n", "s.yaml:1: a scenario is a list of steps, got object", id="not-a-list"),
        pytest.param(
            "- at: 0s\n  delete: {resource: pods, namespace: a, name: b}\n- at: soon\n  delete: {resource: pods, "
            "namespace: a, name: b}\n",
            "s.yaml:3: step 1: at: 'soon' is not valid",
            id="bad-at",
        ),
        pytest.param("- at: 1s\n", "s.yaml:1: step 0: a step has 'at' and exactly one of", id="no-op"),
        pytest.param(
            "- at: 1s\n  delete: {resource: pods, namespace: a, name: b}\n"
            "  patch: {resource: pods, name: b, patch: {}}\n",
            "s.yaml:1: step 0: a step has 'at' and exactly one of",
            id="two-ops",
        ),
        pytest.param(
            "- at: 1s\n  delete: {resource: secrets, namespace: a, name: b}\n",
            "s.yaml:1: step 0: delete.resource: 'secrets' is not one of",
            id="unknown-resource",
        ),
        pytest.param(
            "- at: 1s\n  patch: {resource: pods, namespace: a, name: b}\n",
            "s.yaml:1: step 0: patch: 'patch' is a required property",
            id="patch-without-patch",
        ),
        pytest.param(
            "- at: 1s\n  apply: {apiVersion: v1, kind: Secret, metadata: {name: s, namespace: a}}\n",
            "s.yaml:1: step 0: apply: unknown kind v1 Secret",
            id="unknown-kind",
        ),
        pytest.param(
            "- at: 1s\n  delete: {resource: pods, name: b}\n",
            "s.yaml:1: step 0: delete.namespace: a Pod is namespaced",
            id="missing-namespace",
        ),
        pytest.param(
            "- at: 1s\n  delete: {resource: nodes, namespace: x, name: n}\n",
            "s.yaml:1: step 0: delete.namespace: a Node has no namespace",
            id="node-with-namespace",
        ),
        pytest.param(
            "- at: 2s\n  delete: {resource: nodes, name: n}\n- at: 1s\n  delete: {resource: nodes, name: n}\n",
            "s.yaml:3: step 1: at '1s' is earlier than the step before (2s)",
            id="out-of-order",
        ),
    ],
)
def test_errors_name_line_step_and_problem(text: str, expected: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(text, filename="s.yaml")
    assert any(p.startswith(expected) for p in info.value.problems), info.value.problems


def test_every_problem_is_listed() -> None:
    text = (
        "- at: 1s\n  delete: {resource: pods, name: b}\n- at: 2s\n  delete: {resource: nodes, namespace: x, name: n}\n"
    )
    with pytest.raises(ScenarioError) as info:
        load_scenario(text, filename="s.yaml")
    assert len(info.value.problems) == 2


def test_schema_copy_in_config_is_current() -> None:
    copy = Path(__file__).parents[3] / "config" / "scenario.schema.json"
    assert json.loads(copy.read_text()) == SCHEMA


def _pod(name: str, rv: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "train", "resourceVersion": rv, "uid": "u"}, **extra}


LINES = [
    {"t": 1000, "type": "ADDED", "resource": "pods", "object": _pod("a", "1", spec={"x": 1})},
    {"t": 1000, "type": "LISTED", "resource": "pods", "object": {}},
    {"t": 2500, "type": "MODIFIED", "resource": "pods", "object": _pod("a", "2", spec={"x": 2})},
    {"t": 3000, "type": "ADDED", "resource": "pods", "object": _pod("a", "2", spec={"x": 2})},  # re-list: same rv
    {"t": 4000, "type": "DELETED", "resource": "pods", "object": _pod("a", "3")},
    {"t": 4500, "type": "ADDED", "resource": "deviceinfo", "object": _pod("z", "9")},  # not a scenario resource
]


def test_export_turns_lines_into_steps_that_load() -> None:
    steps = export_scenario(LINES)
    assert steps == [
        {"at": "0s", "apply": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "train"},
                               "spec": {"x": 1}}},
        {"at": "1.5s", "apply": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "train"},
                                 "spec": {"x": 2}}},
        {"at": "3s", "delete": {"resource": "pods", "namespace": "train", "name": "a"}},
    ]  # fmt: skip
    assert [s.op for s in load_scenario(dump_scenario(steps))] == ["apply", "apply", "delete"]


def test_export_window() -> None:
    steps = export_scenario(LINES, from_ms=2000, to_ms=3500)
    assert [(s["at"], next(iter(set(s) - {"at"}))) for s in steps] == [("0s", "apply")]


def test_cli_exports_a_recording_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    body = b"".join(orjson.dumps(x) + b"\n" for x in LINES)
    (rec / "rec-0000000001000-000000.jsonl.gz").write_bytes(gzip.compress(body))
    out = tmp_path / "s.yaml"
    assert main(["replay", "--export-scenario", str(rec), "--from", "1000", "-o", str(out)]) == 0
    assert len(load_scenario(out.read_text())) == 3
    assert main(["replay", "--export-scenario", str(tmp_path / "nope"), "-o", str(out)]) == 2
    assert "no such recording" in capsys.readouterr().err


def test_cli_replay_of_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "x.jsonl.gz")]) == 2
    err = capsys.readouterr().err
    assert "x.jsonl.gz: no such file or folder" in err
    assert "no input record" in err


def test_cli_time_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["replay", "--export-scenario", "x", "--from", "2026-12-01T10:00:00", "-o", "y"])
    assert "needs its zone" in capsys.readouterr().err
