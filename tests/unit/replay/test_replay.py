"""agent.replay: input handling, recording vs scenario form, the agent-owned annotations, what-if, the virtual loop."""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from agent.cli import main
from agent.replay import Problems, Record, compare_decisions, read_inputs, replay, scenario_records, totals
from agent.replay.compare import fault_config_data, other_configuration
from agent.replay.driver import selector_matches
from agent.replay.records import merge_patch
from agent.replay.scenario import load_scenario
from agent.replay.vloop import VirtualLoop, run_virtual
from agent.settings import Settings
from agent.sources.watchers import resources

SCENARIOS = Path(__file__).parent.parent.parent / "scenarios"
START_MS = 1767225600000  # 2026-01-01T00:00:00Z, fault-agent replay --start's default


def scenario(name: str) -> list[Record]:
    path = SCENARIOS / f"{name}.yaml"
    return list(scenario_records(load_scenario(path.read_text(), filename=str(path)), start_ms=START_MS))


def as_recording(records: list[Record], settings: Settings) -> list[dict[str, Any]]:
    """The recording lines a live agent would have written for `records`: the initial objects, then one LISTED
    line per watcher (agent.kube.record format), then the rest."""
    lines: list[dict[str, Any]] = []
    for rec in records:
        if rec.type == "LISTED":
            for res in resources(settings.kube):
                lines.append({"t": rec.t_ms, "type": "LISTED", "resource": res.plural, "source": res.watcher_id,
                              "object": {}})  # fmt: skip
            continue
        obj = {k: v for k, v in rec.object.items() if k not in ("apiVersion", "kind")}  # list items carry neither
        lines.append({"t": rec.t_ms, "type": rec.type, "resource": rec.resource, "object": obj})
    return lines


def write_recording(path: Path, lines: list[dict[str, Any]], *, extra: bytes = b"") -> Path:
    with gzip.open(path, "wb") as fh:
        fh.write(b"".join(orjson.dumps(ln) + b"\n" for ln in lines) + extra)
    return path


def json_lines(outputs: list[Any]) -> list[dict[str, Any]]:
    return [o.as_dict() for o in outputs]


# ---------------------------------------------------------------------------------------------- the replay


def test_a_recording_replays_like_the_scenario_it_was_made_from(tmp_path: Path) -> None:
    settings = Settings()
    records = scenario("chip-fault-restart")
    from_scenario, _ = replay(records, settings, tail_s=30)
    rec = write_recording(tmp_path / "rec-1767225600000-000000.jsonl.gz", as_recording(records, settings))
    problems = Problems()
    from_recording, result = replay(read_inputs([tmp_path], problems), settings, tail_s=30)
    assert problems.items == []
    assert json_lines(from_recording) == json_lines(from_scenario)
    assert [o.action for o in from_recording if o.kind == "decision"] == ["restart-job"]
    assert {"claim-record", "restart-command"} <= {o.action for o in from_recording if o.kind == "write"}
    assert result.records > 0
    assert rec.exists()


def test_a_podgroups_strategy_set_at_runtime_is_replayed_from_a_scenario_and_a_recording(tmp_path: Path) -> None:
    """``podgroups`` lines reach the PodGroup watcher: the annotation patched onto the job's PodGroup at 2 s (the
    job has none) hands the 5 s fault off, from the scenario and from the recording a live agent would write
    (``podgroups`` lines and a ``podgroups@*`` LISTED); with the PodGroup watch off the same fault restarts
    the faulty pod (process-recover-enable)."""
    settings = Settings()
    records = scenario("process-recover-strategy-on-the-podgroup")
    assert {r.resource for r in records} >= {"podgroups"}
    from_scenario, _ = replay(records, settings, tail_s=30)
    lines = as_recording(records, settings)
    assert "podgroups@*" in {ln["source"] for ln in lines if ln["type"] == "LISTED"}
    write_recording(tmp_path / "rec-1767225600000-000000.jsonl.gz", lines)
    problems = Problems()
    from_recording, _ = replay(read_inputs([tmp_path], problems), settings, tail_s=30)
    assert problems.items == []
    assert json_lines(from_recording) == json_lines(from_scenario)
    (decision,) = [o for o in from_recording if o.kind == "decision"]
    assert (decision.as_dict()["t"], decision.action) == ("2026-01-01T00:00:05.000Z", "hand-off")
    assert "the PodGroup's ProcessRecoverStrategy annotation ('recover')" in decision.reason
    writes = {o.action for o in from_recording if o.kind == "write"}
    assert not writes & {"restart-command", "delete-pod", "delete-pods", "resubmit-job"}
    off = Settings(kube={"podgroup_info_enabled": False})
    without, _ = replay(records, off, tail_s=30)
    assert [o.action for o in without if o.kind == "decision"] == ["restart-pods"]


def test_bad_lines_are_named_counted_and_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings()
    lines = as_recording(scenario("chip-fault-restart"), settings)
    fault_at = next(i for i, ln in enumerate(lines) if ln["t"] > START_MS)
    bad = [
        b"{not json\n",
        orjson.dumps({"t": START_MS, "type": "ADDED", "resource": "secrets", "object": {"metadata": {"name": "x"}}})
        + b"\n",
        orjson.dumps({"t": START_MS - 5000, "type": "ADDED", "resource": "pods", "object": {"metadata": {"name": "y"}}})
        + b"\n",
        orjson.dumps({"t": "soon", "type": "ADDED", "resource": "pods", "object": {}}) + b"\n",
    ]
    path = tmp_path / "bad.jsonl"
    body = b"".join(orjson.dumps(ln) + b"\n" for ln in lines[:fault_at]) + b"".join(bad)
    path.write_bytes(body + b"".join(orjson.dumps(ln) + b"\n" for ln in lines[fault_at:]))
    n = fault_at + 1
    assert main(["replay", str(path), "--json", "--tail", "30"]) == 1
    captured = capsys.readouterr()
    assert f"{path}:{n}: not JSON" in captured.err
    assert f"{path}:{n + 1}: unknown resource 'secrets'" in captured.err
    assert f"{path}:{n + 2}: out of order" in captured.err
    assert f"{path}:{n + 3}: 't' must be an integer" in captured.err
    assert "4 input lines skipped" in captured.err
    decisions = [orjson.loads(x) for x in captured.out.splitlines() if '"decision"' in x]
    assert [d["action"] for d in decisions] == ["restart-job"]  # the good lines were still replayed


def test_the_recorded_agents_own_annotations_do_not_feed_back(tmp_path: Path) -> None:
    """The recorded job carries the live agent's claim (actor annotation) after its restart; the replayed agent
    must still claim the job for its second incident (the recording's annotations are the recorded agent's
    output, not input: agent.replay.ports.JobAnnotations)."""
    records = scenario("repeat-fault-after-restart")
    stamped: list[Record] = []
    for rec in records:
        if rec.resource == "vcjobs" and rec.t_ms > START_MS:
            obj = orjson.loads(orjson.dumps(rec.object))
            obj["metadata"].setdefault("annotations", {})["fault-agent.io/actor"] = "live-agent-0#7"
            rec = Record(rec.t_ms, rec.type, rec.resource, obj, rec.source, rec.where)
        stamped.append(rec)
    outputs, _ = replay(stamped, Settings(), tail_s=30)
    restarts = [o for o in outputs if o.kind == "write" and o.action == "restart-command"]
    assert [o.t.minute for o in restarts] == [0, 1]  # both incidents restarted, the second at 00:01:30


def test_scenario_records_make_what_an_apiserver_would() -> None:
    text = yaml.safe_dump(
        [
            {"at": 0, "apply": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "1"}}}},
            {"at": 1, "patch": {"resource": "nodes", "name": "n1", "patch": {"metadata": {"labels": {"a": None}}}}},
            {"at": 1, "patch": {"resource": "nodes", "name": "gone", "patch": {"metadata": {}}}},
            {"at": 2, "delete": {"resource": "nodes", "name": "n1"}},
            {"at": 3, "apply": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}},
        ]
    )
    recs = list(scenario_records(load_scenario(text), start_ms=START_MS))
    assert [(r.type, r.t_ms - START_MS) for r in recs] == [
        ("ADDED", 0), ("LISTED", 0), ("MODIFIED", 1000), ("DELETED", 2000), ("ADDED", 3000),
    ]  # fmt: skip
    assert recs[2].object["metadata"]["labels"] == {}
    uids = [r.object["metadata"].get("uid") for r in recs if r.type != "LISTED"]
    assert uids[0] == uids[1] == uids[2] != uids[3]  # made again: a new UID
    versions = [int(r.object["metadata"]["resourceVersion"]) for r in recs if r.type != "LISTED"]
    assert versions == sorted(versions)
    assert len(set(versions)) == 4
    assert recs[0].object["metadata"]["creationTimestamp"] == "2026-01-01T00:00:00Z"
    assert recs[-1].object["metadata"]["creationTimestamp"] == "2026-01-01T00:00:03Z"
    assert list(scenario_records(load_scenario(text), start_ms=START_MS)) == recs  # deterministic


@pytest.mark.parametrize(
    ("target", "patch", "want"),
    [
        ({"a": 1}, {"a": None}, {}),
        ({"a": {"b": 1, "c": 2}}, {"a": {"b": 3}}, {"a": {"b": 3, "c": 2}}),
        ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),
        ({}, {"x": {"y": None}}, {"x": {}}),
        ({"a": 1}, "scalar", "scalar"),
    ],
)
def test_merge_patch_rfc7386(target: Any, patch: Any, want: Any) -> None:
    assert merge_patch(target, patch) == want


@pytest.mark.parametrize(
    ("selector", "labels", "want"),
    [
        ("", {}, True),
        ("a=1", {"a": "1"}, True),
        ("a==1", {"a": "2"}, False),
        ("a!=1", {"a": "2"}, True),
        ("a", {}, False),
        ("!a", {"b": "1"}, True),
        ("a in (1, 2),b", {"a": "2", "b": "x"}, True),
        ("a notin (1,2)", {"a": "1"}, False),
        ("a notin (1,2)", {}, True),
    ],
)
def test_selector_matches(selector: str, labels: dict[str, str], want: bool) -> None:
    assert selector_matches(selector, labels) is want


def test_virtual_loop_moves_time_only_when_idle() -> None:
    async def main_() -> tuple[float, float, list[str]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualLoop)
        order: list[str] = []

        async def later(name: str, s: float) -> None:
            await asyncio.sleep(s)
            order.append(f"{name}@{loop.time():g}")

        t0 = loop.time()
        await asyncio.gather(later("b", 7200), later("a", 3600))
        return t0, loop.time(), order

    t0, t1, order = run_virtual(main_())
    assert (t0, t1, order) == (0.0, 7200.0, ["a@3600", "b@7200"])


# ---------------------------------------------------------------------------------------------- what-if


FREQUENCY_RULE = {
    "FaultFrequency": [
        {"EventId": ["80E01801"], "TimeWindow": 86400, "Times": 2, "FaultHandling": "PreSeparateNPU",
         "ReleaseTimeWindow": 3600},
    ]
}  # fmt: skip


def test_a_changed_fault_level_rule_flips_a_decision(tmp_path: Path) -> None:
    """The shipped frequency rule makes the second RestartBusiness fault ManuallySeparateNPU (restart); a table that
    makes it PreSeparateNPU leaves the job running: exactly that decision differs."""
    other_file = tmp_path / "levels.yaml"
    other_file.write_text(yaml.safe_dump(FREQUENCY_RULE))
    base = Settings()
    other, inject = other_configuration(other_file, base)
    records = scenario("repeat-fault-after-restart")
    out_a, res_a = replay(records, base, tail_s=30)
    out_b, res_b = replay(records, other, tail_s=30, inject=inject)
    diffs = compare_decisions(res_a.decisions, res_b.decisions)
    assert [(d.job, d.a, d.b) for d in diffs] == [("vcjob/mindx-dls-test", "restart-job", "none")]
    assert "pre-separate" in diffs[0].reason
    assert diffs[0].t.isoformat() == "2026-01-01T00:01:30+00:00"
    assert totals(out_a)["restarts"] == 2
    assert totals(out_b)["restarts"] == 1


def test_compare_cli_prints_the_table_and_totals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other_file = tmp_path / "levels.yaml"
    other_file.write_text(yaml.safe_dump(FREQUENCY_RULE))
    path = str(SCENARIOS / "repeat-fault-after-restart.yaml")
    assert main(["replay", path, "--tail", "30", "--compare", str(other_file)]) == 0
    text = capsys.readouterr().out
    assert "Decisions that differ" in text
    assert "restart-job" in text
    assert "none" in text
    assert "1 decisions differ" in text
    assert main(["replay", path, "--tail", "30", "--compare", str(other_file), "--json"]) == 0
    rows = [orjson.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert rows[0] == {"t": "2026-01-01T00:01:30.000Z", "job": "vcjob/mindx-dls-test", "a": "restart-job",
                       "b": "none", "reason": rows[0]["reason"]}  # fmt: skip
    assert rows[-1]["totals"]["a"]["restarts"] == 2
    assert rows[-1]["totals"]["b"]["restarts"] == 1


def test_compare_with_a_settings_file(tmp_path: Path) -> None:
    """A settings file as the other configuration: a job namespace the recording's job is not in sees nothing."""
    other_file = tmp_path / "agent.yaml"
    other_file.write_text(yaml.safe_dump({"kube": {"namespaces": ["elsewhere"]}}))
    other, inject = other_configuration(other_file, Settings())
    assert inject == []
    assert other.kube.namespaces == ["elsewhere"]
    records = scenario("chip-fault-restart")
    _, res_a = replay(records, Settings(), tail_s=30)
    _, res_b = replay(records, other, tail_s=30)
    assert [(d.a, d.b) for d in compare_decisions(res_a.decisions, res_b.decisions)] == [("restart-job", "")]


@pytest.mark.parametrize(
    ("data", "keys"),
    [
        ({"kube": {}}, None),
        ({"SeparateNPUCodes": ["80E01801"]}, ["faultCode.json"]),
        ({"FaultFrequency": []}, ["faultCode.json", "faultCustomization.json"]),
        ({"faultCode.json": "{}", "SwitchFaultCode.json": {"a": []}}, ["SwitchFaultCode.json", "faultCode.json"]),
    ],
)
def test_fault_config_data_recognises_fault_level_files(data: dict[str, Any], keys: list[str] | None) -> None:
    got = fault_config_data(data)
    assert (sorted(got) if got is not None else None) == keys
    if got is not None:
        assert all(isinstance(v, str) for v in got.values())


def test_a_replayed_taint_is_in_the_replayed_state_until_lifted() -> None:
    """The quarantine taint the replayed agent writes shows on the replayed node at once (as the apiserver's answer
    would), so the reconcile does not write it again every tick; a recorded taint of the recording agent does not
    count as the replayed agent's."""
    records = scenario("node-not-ready")
    first = next(r for r in records if r.resource == "nodes" and r.object["metadata"]["name"] == "worker-01")
    obj = orjson.loads(orjson.dumps(first.object))
    obj["metadata"]["resourceVersion"] = "9999"
    obj.setdefault("spec", {})["taints"] = [{"key": "fault-agent.io/fault", "value": "x", "effect": "NoSchedule"}]
    at = next(i for i, r in enumerate(records) if r.t_ms >= START_MS + 30000)
    stamped = [*records[:at], Record(START_MS + 30000, "MODIFIED", "nodes", obj), *records[at:]]
    outputs, _ = replay(stamped, Settings(), tail_s=30)
    writes = [(o.action, o.reason.split()[0]) for o in outputs if o.kind == "write" and "taint" in o.action]
    assert writes == [("taint-node", "Node/worker-02"), ("untaint-node", "Node/worker-02")]


def test_compare_with_the_shipped_fault_level_table_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """config/fault_levels.yaml as the other configuration: read as a fault-level table (its lists become the
    override ConfigMap's faultCode.json); the shipped levels again decide the same."""
    table = Path(__file__).parent.parent.parent.parent / "config" / "fault_levels.yaml"
    _, inject = other_configuration(table, Settings())
    assert [r.object["metadata"]["name"] for r in inject] == ["mindx-dl-fault-config"]
    assert "SeparateNPUCodes" in inject[0].object["data"]["faultCode.json"]
    path = str(SCENARIOS / "chip-fault-restart.yaml")
    assert main(["replay", path, "--tail", "30", "--compare", str(table)]) == 0
    text = capsys.readouterr().out
    assert "0 decisions differ" in text


def test_a_held_initial_list_is_listed_a_page_at_a_time_and_only_what_changed_is_parsed_again() -> None:
    """The replay keeps an initial list's ADDED records as their watch lines until their LISTED record: the re-list
    reads them a page at a time; an object whose record the cache still holds is handed over as its metadata only
    (the re-list keeps the cached record, as it would for the whole object), one whose cached record changed in
    between (the replayed agent's own write) as the whole object, parsed back from its line."""
    from types import SimpleNamespace

    from agent.kube.watch import Resource
    from agent.replay.driver import _Held, _list_items, _ListTransport

    objs = [{"metadata": {"name": f"n{i}", "uid": f"u{i}", "resourceVersion": "7"}, "spec": {}} for i in range(5)]
    recs = {o["metadata"]["name"]: SimpleNamespace(uid=o["metadata"]["uid"], resource_version="7") for o in objs}
    held = [_Held(o["metadata"]["name"], orjson.dumps({"type": "ADDED", "object": o}), recs[o["metadata"]["name"]])
            for o in objs]  # fmt: skip
    cache = dict(recs)
    cache["n3"] = SimpleNamespace(uid="u3", resource_version="7+replay.1")  # the agent's write came between
    watcher = SimpleNamespace(cache=cache, tap=None)
    transport = _ListTransport()
    res = Resource("nodes", "Node", "", "v1", "nodes")
    transport.items[res.watcher_id] = _list_items(watcher, held)  # type: ignore[arg-type]
    pages = []
    token = ""
    while True:
        page = asyncio.run(transport.list_page(res, limit=2, continue_token=token))
        pages.append(page.items)
        token = page.continue_token
        if not token:
            break
    assert [len(p) for p in pages] == [2, 2, 1]
    items = [item for p in pages for item in p]
    assert items[3] == objs[3]  # parsed back whole
    assert [i for n, i in enumerate(items) if n != 3] == [
        {"metadata": {"name": f"n{n}", "uid": f"u{n}", "resourceVersion": "7"}} for n in (0, 1, 2, 4)
    ]
    assert res.watcher_id not in transport.items  # the last page ends the list


def test_a_held_item_of_a_source_the_replay_never_rewrites_keeps_no_line() -> None:
    """An item held without its line (its record was cached at once and its source is not one the replay rewrites
    under a new resourceVersion): re-listed as its metadata while the cache holds a record of that write, even a
    different object (the state's rewrite of a job: the same UID and resourceVersion); a cached record of another
    write is a bug (the line would be needed), raised rather than re-listed as something else."""
    from types import SimpleNamespace

    from agent.replay.driver import _Held, _list_items

    rec = SimpleNamespace(uid="u0", resource_version="7")
    held = [_Held("ns/j0", None, rec)]
    rewritten = SimpleNamespace(uid="u0", resource_version="7", settings_from="podgroup")
    watcher = SimpleNamespace(cache={"ns/j0": rewritten}, tap=None, resource=SimpleNamespace(watcher_id="vcjobs@*"))
    assert list(_list_items(watcher, held)) == [  # type: ignore[arg-type]
        {"metadata": {"name": "j0", "namespace": "ns", "uid": "u0", "resourceVersion": "7"}}
    ]
    watcher.cache["ns/j0"] = SimpleNamespace(uid="u0", resource_version="8")
    with pytest.raises(AssertionError, match="held without its line"):
        list(_list_items(watcher, held))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name", ["chip-fault-restart", "ascendjob-chip-fault-restart", "node-not-ready", "flapping-quarantine"]
)
def test_held_items_without_their_lines_replay_as_with_them(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The held initial lists keep no line for the records the cache holds (pods, device ConfigMaps, jobs): the
    replay's outputs are those of keeping every line (as before 2026-12-06, when each re-list item whose cached
    record was another object was parsed back whole), and lines were indeed dropped."""
    import agent.replay.driver as driver
    from agent.sources.state import SOURCES

    records = scenario(name)
    kept, _ = replay(records, Settings(), tail_s=30)
    seen: list[driver._Held] = []
    real = driver._list_items

    def spy(w: Any, held: list[driver._Held]) -> Any:
        seen.extend(held)
        return real(w, held)

    monkeypatch.setattr(driver, "_list_items", spy)
    dropped, _ = replay(records, Settings(), tail_s=30)
    assert any(h.line is None for h in seen)
    monkeypatch.setattr(driver, "REWRITTEN", frozenset(SOURCES))  # every line kept: the old way
    seen.clear()
    old, _ = replay(records, Settings(), tail_s=30)
    assert all(h.line is not None for h in seen)
    assert json_lines(dropped) == json_lines(old) == json_lines(kept)
