"""Typed decoding of pod watch lines (agent.sources.pods.PodLines) against the whole-object way it replaces on the
watch (issue 39): the same records, changes, counts, rejections, logs and errors event by event; bad lines declined
to the whole-object way; and the same-write hash (pod_raw_hash of the raw bytes, pod_input_hash of a parsed object)
never equal for different content, equal between the two for the apiserver's compact JSON."""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from support.bench_scripts import load_bench_script
from support.fakes import FakeTransport

from agent.core.cluster import PodRecord
from agent.kube.watch import Change, ChangeType, CountingObserver, ListPage, Resource, Watcher
from agent.sources.pods import PodConverter, PodLines, pod_input_hash, pod_raw_hash
from agent.sources.state import ClusterState

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PODS = Resource("pods", "Pod", "", "v1", "pods")
bench_ingest = load_bench_script("bench_ingest.py", "bench_ingest_for_pod_lines")


def line(type_: str, obj: Any) -> bytes:
    """A watch line as the apiserver writes it: compact JSON (the standard library's, as orjson's output but for
    integers beyond 64 bits, which orjson does not write)."""
    return json.dumps({"type": type_, "object": obj}, separators=(",", ":"), ensure_ascii=False).encode()


def base_pod(rv: str = "100", i: int = 3) -> dict[str, Any]:
    """A realistic 5 KB training pod (bench/bench_ingest.py's), every field the converter reads set."""
    pod: dict[str, Any] = bench_ingest.make_pod(i, rv=int(rv))
    return pod


class Side:
    """One watcher on the typed way (`typed`) or the whole-object way, and everything it did, line by line."""

    def __init__(self, typed: bool, *, prefix: str = "", tap: bool = False) -> None:
        self.state = ClusterState()
        self.changes: list[tuple[Any, ...]] = []
        self.observer = CountingObserver()
        self.converter = PodConverter()
        self.whole_conversions = 0
        self.tapped: list[tuple[str, dict[str, Any]]] = []

        def convert(obj: dict[str, Any]) -> Any:
            self.whole_conversions += 1
            return self.converter(obj)

        def sink(change: Change[Any]) -> None:
            self.state.apply(change)
            self.changes.append((change.type, change.source, change.key, change.new, change.old, change.relist))

        self.watcher: Watcher[PodRecord] = Watcher(
            FakeTransport(),
            Resource("pods", "Pod", "", "v1", "pods", name_prefix=prefix),
            convert,
            self.state.store("pods"),
            sink,
            observer=self.observer,
            unchanged=self.converter.unchanged,
            typed=PodLines(self.converter) if typed else None,
            tap=(lambda type_, obj: self.tapped.append((type_, obj))) if tap else None,
        )

    def feed(self, data: bytes | memoryview) -> tuple[Any, ...]:
        """Apply one line; what it did: the error, the watcher's resourceVersion and progress, the counts, the
        changes, the cache, the log lines and the tapped objects (all since the last line)."""
        del self.changes[:]
        del self.tapped[:]
        error: tuple[str, str] | None = None
        with structlog.testing.capture_logs() as logs:
            try:
                self.watcher.on_line(data)
            except Exception as e:  # the errors of both ways are compared, whatever they are
                error = (type(e).__name__, str(e))
        w = self.watcher
        return (
            error,
            w.resource_version,
            w._progress,
            dict(self.observer.events),
            dict(self.observer.rejected),
            list(self.changes),
            dict(self.state.pods),
            logs,
            list(self.tapped),
        )


def same_way(lines: Iterable[bytes], **kw: Any) -> tuple[Side, Side]:
    """Feed `lines` to a typed and a whole-object watcher; assert they did the same after every line."""
    old, new = Side(False, **kw), Side(True, **kw)
    for n, data in enumerate(lines):
        assert new.feed(data) == old.feed(data), f"line {n}: {bytes(data)[:200]!r}"
    assert new.state.check_indexes() == []
    return old, new


# ---- equivalence, event by event --------------------------------------------------------------------------------


def test_the_bench_ingest_stream_gives_the_same_records_event_by_event_without_parsing_a_line_whole() -> None:
    lines = list(bench_ingest.event_lines(3000, 300))
    old, new = same_way(lines)
    assert new.whole_conversions == 0  # every line went the typed way
    assert old.whole_conversions > 300  # the whole-object way converted the writes that changed something
    assert len(new.state.pods) == 300


def test_the_bench_ingest_stream_read_as_memoryviews_and_with_a_name_prefix_gives_the_same() -> None:
    """Lines as the watch hands them on (views into a chunk), and a watcher keeping only some names."""
    lines = [memoryview(b"xx" + data + b"\n")[2:-1] for data in bench_ingest.event_lines(800, 100)]
    _, new = same_way(lines, prefix="llm-pretrain-00002")
    assert 0 < len(new.state.pods) < 100
    assert new.whole_conversions == 0


def fixture_pods() -> list[dict[str, Any]]:
    """The pods of tests/fixtures (the as-scheduled examples and the real cluster's recording), as served."""
    pods = [d for d in yaml.safe_load_all((FIXTURES / "pods-as-scheduled.yaml").read_text()) if d]
    folder = FIXTURES / "conformance" / "clusterd-real-22bb3d98-agent-recording"
    for path in sorted(folder.glob("*.jsonl.gz")):
        with gzip.open(path) as fh:
            pods += [r["object"] for r in map(orjson.loads, fh) if r["resource"] == "pods" and r["object"]]
    for i, p in enumerate(pods):
        meta = p["metadata"]
        meta.setdefault("uid", f"uid-{i}")
        meta.setdefault("resourceVersion", "1")
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
    assert len(pods) >= 4
    return pods


def writes_of(pod: dict[str, Any]) -> list[bytes]:
    """A pod's life as watch lines: added, touched (managedFields and resourceVersion only), each part the
    converter reads changed in turn, replayed, deleted and re-created with another UID."""
    out: list[bytes] = []
    rv = 1000

    def write(type_: str, change: Callable[[dict[str, Any]], None] | None = None) -> None:
        nonlocal rv, pod
        pod = copy.deepcopy(pod)
        if change is not None:
            change(pod)
            rv += 1
            pod["metadata"]["resourceVersion"] = str(rv)
        out.append(line(type_, pod))

    def status(p: dict[str, Any]) -> dict[str, Any]:
        s: dict[str, Any] = p.setdefault("status", {})
        return s

    write("ADDED", lambda p: None)
    write("MODIFIED", lambda p: p["metadata"].__setitem__("managedFields", [{"manager": "kubelet"}]))
    write("MODIFIED", lambda p: p["metadata"].setdefault("labels", {}).__setitem__("fault-type", "hardware"))
    write("MODIFIED", lambda p: p["metadata"].setdefault("annotations", {}).__setitem__("hccl/rankIndex", "5"))
    write("MODIFIED", lambda p: p["metadata"].setdefault("annotations", {}).__setitem__("needVolcanoOpe", "delete"))
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "j2", "uid": "o2", "controller": True}
    write("MODIFIED", lambda p: p["metadata"].__setitem__("ownerReferences", [owner]))
    write("MODIFIED", lambda p: p.setdefault("spec", {}).__setitem__("nodeName", "elsewhere"))
    write("MODIFIED", lambda p: p.setdefault("spec", {}).__setitem__("restartPolicy", "OnFailure"))
    write("MODIFIED", lambda p: status(p).__setitem__("phase", "Failed"))
    write("MODIFIED", lambda p: status(p).__setitem__("reason", "Evicted"))
    write(
        "MODIFIED",
        lambda p: status(p).__setitem__(
            "containerStatuses",
            [{"name": "c", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                   "finishedAt": "2026-01-01T06:00:00Z"}}}],
        ),
    )  # fmt: skip
    write(
        "MODIFIED",
        lambda p: status(p).__setitem__(
            "conditions", [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
        ),
    )
    write("MODIFIED", lambda p: p["metadata"].__setitem__("deletionTimestamp", "2026-01-01T07:00:00Z"))
    write("MODIFIED", None)  # the same write again (after a reconnect)
    write("DELETED", lambda p: None)
    write("ADDED", lambda p: p["metadata"].__setitem__("uid", "re-created"))
    return out


def test_the_fixture_pods_through_every_kind_of_write_give_the_same_records_event_by_event() -> None:
    lines = [data for pod in fixture_pods() for data in writes_of(pod)]
    _, new = same_way(lines)
    assert len(new.state.pods) == len({(p["metadata"].get("namespace"), p["metadata"]["name"]) for p in fixture_pods()})
    assert new.whole_conversions == 0  # DELETED lines are parsed whole but not converted


def test_a_tapped_watcher_taps_the_whole_objects_as_before() -> None:
    lines = [data for pod in fixture_pods()[:2] for data in writes_of(pod)]
    _, new = same_way(lines, tap=True)
    assert new.whole_conversions == 0


def test_a_record_from_a_list_and_a_watch_line_of_the_same_content_skip_each_other() -> None:
    """The list reads pods whole (pod_input_hash), the watch typed (pod_raw_hash): for the apiserver's compact JSON
    the two hashes agree, so a write that changed nothing is skipped whichever way the cached record came."""
    listed = base_pod("100")
    touched = copy.deepcopy(listed)
    touched["metadata"]["resourceVersion"] = "101"
    touched["metadata"]["managedFields"] = []
    for typed in (False, True):
        side = Side(typed)
        items: dict[str, PodRecord | None] = {}
        side.watcher._list_item(copy.deepcopy(listed), items)
        rec = items[f"train/{listed['metadata']['name']}"]
        assert rec is not None
        side.state.apply(Change(ChangeType.ADDED, "pods", f"train/{listed['metadata']['name']}", rec, None, True, 0))
        side.feed(line("MODIFIED", touched))
        assert side.changes == []  # unchanged: not converted, the cache keeps the listed record
        assert side.whole_conversions == 1  # the list item only
        # and back: the relisted touched write finds the record of the watch's write the same
        items = {}
        side.watcher._list_item(copy.deepcopy(touched), items)
        assert side.whole_conversions == 1


# ---- bad lines: declined to the whole-object way, which reports them as it always did -----------------------------


def meta(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda p: p["metadata"].__setitem__(key, value)


def drop(*path: str) -> Callable[[dict[str, Any]], None]:
    def change(p: dict[str, Any]) -> None:
        d = p
        for k in path[:-1]:
            d = d[k]
        del d[path[-1]]

    return change


def at(value: Any, *path: str) -> Callable[[dict[str, Any]], None]:
    def change(p: dict[str, Any]) -> None:
        d = p
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value

    return change


BAD_OBJECTS: list[Any] = [
    pytest.param(meta("name", 5), id="name-int"),
    pytest.param(meta("name", ""), id="name-empty"),
    pytest.param(drop("metadata", "name"), id="name-missing"),
    pytest.param(meta("uid", ["u"]), id="uid-list"),
    pytest.param(meta("uid", ""), id="uid-empty"),
    pytest.param(drop("metadata", "uid"), id="uid-missing"),
    pytest.param(meta("resourceVersion", 101), id="rv-int"),
    pytest.param(meta("resourceVersion", ""), id="rv-empty"),
    pytest.param(drop("metadata", "resourceVersion"), id="rv-missing"),
    pytest.param(meta("namespace", None), id="namespace-null"),
    pytest.param(meta("namespace", 7), id="namespace-int"),
    pytest.param(at(17, "spec", "nodeName"), id="node-int"),
    pytest.param(at(None, "spec", "nodeName"), id="node-null"),
    pytest.param(at(["Never"], "spec", "restartPolicy"), id="restart-policy-list"),
    pytest.param(at("spec", "spec"), id="spec-string"),
    pytest.param(at(None, "spec"), id="spec-null"),
    pytest.param(drop("spec"), id="spec-missing"),
    pytest.param(meta("labels", ["a"]), id="labels-not-an-object"),
    pytest.param(meta("labels", None), id="labels-null"),
    pytest.param(meta("labels", {"a": 1}), id="label-value-int"),
    pytest.param(meta("annotations", "text"), id="annotations-string"),
    pytest.param(meta("annotations", {"hccl/rankIndex": "x"}), id="rank-not-a-number"),
    pytest.param(meta("ownerReferences", {"kind": "Job"}), id="owners-object"),
    pytest.param(meta("ownerReferences", [5]), id="owner-not-an-object"),
    pytest.param(meta("creationTimestamp", 5), id="created-int"),
    pytest.param(meta("creationTimestamp", 0), id="created-zero"),
    pytest.param(meta("creationTimestamp", "yesterday"), id="created-garbage"),
    pytest.param(meta("deletionTimestamp", "2026-01-01T00:00:00"), id="deletion-no-zone"),
    pytest.param(at("Running", "status"), id="status-string"),
    pytest.param(at(None, "status"), id="status-null"),
    pytest.param(drop("status"), id="status-missing"),
    pytest.param(at("Ready", "status", "conditions"), id="conditions-string"),
    pytest.param(at([1], "status", "conditions"), id="condition-int"),
    pytest.param(
        at([{"name": "c", "state": {"terminated": {"exitCode": "1"}}}], "status", "containerStatuses"),
        id="exit-code-string",
    ),
    pytest.param(at({"x": 1}, "metadata"), id="metadata-without-name"),
    pytest.param(at([1], "metadata"), id="metadata-list"),
    pytest.param(at(None, "metadata"), id="metadata-null"),
    pytest.param(drop("metadata"), id="metadata-missing"),
    pytest.param(at(2**70, "spec", "priority"), id="int-beyond-64-bits-unread"),
    pytest.param(at(2**70, "status", "containerStatuses", 0, "restartCount"), id="int-beyond-64-bits-read"),
    pytest.param(meta("annotations", {"big": "x" * 4_000_000}), id="huge-line"),
    pytest.param(at("a\u2028<b>&c", "metadata", "labels", "app"), id="html-and-separators"),
]


BAD_LINES: list[Any] = [
    pytest.param(lambda p: line("ADDED", p)[:-10], id="truncated"),
    pytest.param(lambda p: b"not json", id="not-json"),
    pytest.param(lambda p: b"[1, 2]", id="an-array"),
    pytest.param(lambda p: orjson.dumps({"type": "MODIFIED"}), id="no-object"),
    pytest.param(lambda p: orjson.dumps({"type": "MODIFIED", "object": None}), id="object-null"),
    pytest.param(lambda p: orjson.dumps({"type": "MODIFIED", "object": [p]}), id="object-list"),
    pytest.param(lambda p: orjson.dumps({"type": 5, "object": p}), id="type-int"),
    pytest.param(lambda p: orjson.dumps({"object": p}), id="type-missing"),
    pytest.param(lambda p: line("RESIZED", p), id="type-unknown"),
    pytest.param(lambda p: line("DELETED", p), id="deleted"),
    pytest.param(
        lambda p: line(
            "BOOKMARK",
            {
                "kind": "Pod",
                "metadata": {"resourceVersion": "555", "annotations": {"k8s.io/initial-events-end": "true"}},
            },
        ),
        id="bookmark",
    ),
    pytest.param(
        lambda p: line(
            "ERROR",
            {
                "kind": "Status",
                "status": "Failure",
                "message": "too old resource version",
                "reason": "Expired",
                "code": 410,
                "metadata": {},
            },
        ),
        id="error-410",
    ),
    pytest.param(
        lambda p: line("ERROR", {"kind": "Status", "status": "Failure", "reason": "InternalError", "code": 500}),
        id="error-500",
    ),
    pytest.param(lambda p: line("MODIFIED", p).replace(b'"type":"MODIFIED"', b' "type" : "MODIFIED" '), id="spaces"),
    pytest.param(
        lambda p: line("MODIFIED", p).replace(b'"metadata":{', b'"metadata":{"name":"shadowed",', 1),
        id="duplicate-key",
    ),
    pytest.param(lambda p: line("MODIFIED", p).replace(b'"Guaranteed"', b'"\\ud800"'), id="lone-surrogate-unread"),
    pytest.param(lambda p: line("MODIFIED", p).replace(b'"Running"', b'"\\ud800"', 1), id="lone-surrogate-read"),
    pytest.param(lambda p: line("MODIFIED", p).replace(b'"priority":0', b'"priority":NaN'), id="nan"),
    pytest.param(lambda p: line("MODIFIED", p).replace(b"}}}", b"},}}", 1), id="trailing-comma"),
    pytest.param(
        lambda p: line("MODIFIED", p).replace(b'"priority":0', b'"priority":' + b"[" * 1100 + b"]" * 1100),
        id="too-deep",
    ),
    pytest.param(
        lambda p: line("MODIFIED", p).replace(b'"priority":0', b'"priority":' + b"[" * 500 + b"]" * 500),
        id="deep-but-not-too-deep",
    ),
]


@pytest.mark.parametrize("cached", [True, False], ids=["cached", "fresh"])
@pytest.mark.parametrize("change", BAD_OBJECTS)
def test_a_bad_object_is_reported_as_by_the_whole_object_way(
    change: Callable[[dict[str, Any]], None], cached: bool
) -> None:
    """With the pod cached (a good write before: the same-write check runs) and without: the same error or
    rejection (reason, log line, count), the same changes, and the good lines after it too."""
    bad = base_pod("101")
    change(bad)
    after = base_pod("102")
    after["status"]["phase"] = "Failed"
    lines = [line("ADDED", base_pod("100"))] if cached else []
    same_way([*lines, line("MODIFIED", bad), line("MODIFIED", bad), line("MODIFIED", after)])


@pytest.mark.parametrize("cached", [True, False], ids=["cached", "fresh"])
@pytest.mark.parametrize("make_line", BAD_LINES)
def test_a_bad_line_is_reported_as_by_the_whole_object_way(
    make_line: Callable[[dict[str, Any]], bytes], cached: bool
) -> None:
    bad = make_line(base_pod("101"))
    lines = [line("ADDED", base_pod("100"))] if cached else []
    same_way([*lines, bad, line("MODIFIED", base_pod("102"))])


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(b'"priority":1e400', id="number-beyond-double"),
        pytest.param(b'"priority":"\xff\xfe"', id="not-utf-8"),
    ],
)
def test_what_the_typed_way_skips_unread_is_checked_for_json_syntax_only(text: bytes) -> None:
    """The documented difference: orjson refuses the whole line for a number out of the double range or bytes that
    are not UTF-8 anywhere in it (StreamCorrupt: the watch restarts); msgspec checks the parts it skips for syntax
    only, so a write whose read parts are good is applied. The apiserver (Go's encoding/json) writes neither."""
    data = line("MODIFIED", base_pod("101")).replace(b'"priority":0', text)
    old, new = Side(False), Side(True)
    error = old.feed(data)[0]
    assert error is not None
    assert error[0] == "StreamCorrupt"
    assert new.feed(data)[0] is None
    assert new.state.pods[f"train/{base_pod()['metadata']['name']}"] == PodConverter()(base_pod("101"))
    # in a part the converter reads, both refuse it: the typed way declines to the whole-object way
    read = line("MODIFIED", base_pod("101")).replace(b'"Running"', text.split(b":", 1)[1], 1)
    same_way([read])


# ---- the same-write hash ------------------------------------------------------------------------------------------


def raw_hash(data: bytes) -> int:
    t = PodLines(PodConverter()).decode(data)
    assert t is not None
    return pod_raw_hash(t.decoded)


READ_PARTS: list[Any] = [
    pytest.param(meta("uid", "other"), id="uid"),
    pytest.param(meta("creationTimestamp", "2026-01-02T00:00:00Z"), id="created"),
    pytest.param(meta("deletionTimestamp", "2026-01-02T00:00:00Z"), id="deleted"),
    pytest.param(at("2", "metadata", "labels", "app"), id="label-value"),
    pytest.param(at("x", "metadata", "labels", "new"), id="label-added"),
    pytest.param(drop("metadata", "labels", "app"), id="label-removed"),
    pytest.param(meta("labels", {}), id="labels-empty"),
    pytest.param(drop("metadata", "labels"), id="labels-absent"),
    pytest.param(meta("labels", None), id="labels-null"),
    pytest.param(at("1", "metadata", "annotations", "volcano.sh/job-version"), id="annotation"),
    pytest.param(at("o", "metadata", "ownerReferences", 0, "uid"), id="owner"),
    pytest.param(at("n9", "spec", "nodeName"), id="node"),
    pytest.param(drop("spec", "nodeName"), id="node-absent"),
    pytest.param(at("Always", "spec", "restartPolicy"), id="restart-policy"),
    pytest.param(at("Failed", "status", "phase"), id="phase"),
    pytest.param(at("False", "status", "conditions", 2, "status"), id="ready"),
    pytest.param(at(1, "status", "containerStatuses", 0, "restartCount"), id="restart-count"),
    pytest.param(at("b", "status", "podIP"), id="pod-ip"),
    pytest.param(drop("status"), id="status-absent"),
    pytest.param(
        lambda p: p["metadata"].__setitem__("labels", {"app": "mindspore", "volcano.sh/job-name": "x"}),
        id="labels-moved-between-keys",
    ),
]


@pytest.mark.parametrize("change", READ_PARTS)
def test_different_content_of_a_read_part_never_hashes_equal(change: Callable[[dict[str, Any]], None]) -> None:
    """Either hash, and across them (a cached record from a list met by a watch line, and back)."""
    before = base_pod("100")
    after = base_pod("101")
    change(after)
    a, b = line("MODIFIED", before), line("MODIFIED", after)
    hashes = {raw_hash(a), raw_hash(b), pod_input_hash(orjson.loads(a)["object"]), pod_input_hash(after)}
    assert raw_hash(a) == pod_input_hash(before)  # compact JSON: the two ways agree
    assert raw_hash(a) != raw_hash(b)
    assert pod_input_hash(before) != pod_input_hash(after)
    assert raw_hash(a) != pod_input_hash(after)
    assert raw_hash(b) != pod_input_hash(before)
    assert len(hashes) == 2
    # and the watch hands the write on (never skipped as unchanged)
    _, new = same_way([line("ADDED", before), b])
    assert [c[0].value for c in new.changes] in (["MODIFIED"], ["DELETED", "ADDED"])


APP = b'"app":"mindspore",'


@pytest.mark.parametrize(
    "rewrite",
    [
        pytest.param(lambda d: d.replace(APP, b"").replace(b'"labels":{', b'"labels":{' + APP), id="key-order"),
        pytest.param(lambda d: d.replace(b'"phase":"Running"', b'"phase" : "Running"'), id="spacing"),
        pytest.param(lambda d: d.replace(b'"phase":"Running"', b'"phase":"Runn\\u0069ng"'), id="escape"),
    ],
)  # fmt: skip
def test_equal_content_written_otherwise_may_hash_otherwise_and_costs_one_conversion(
    rewrite: Callable[[bytes], bytes],
) -> None:
    """Another key order, spacing or escaping of the same content: another raw hash, so the write is converted
    again (a MODIFIED of an equal record, its new resourceVersion) where the whole-object way skipped it."""
    first = line("ADDED", base_pod("100"))
    again = rewrite(line("MODIFIED", base_pod("101")))
    assert orjson.loads(again) == orjson.loads(line("MODIFIED", base_pod("101")))
    assert raw_hash(again) != raw_hash(first)
    new = Side(True)
    new.feed(first)
    new.feed(again)
    assert [(c[0].value, c[3].resource_version) for c in new.changes] == [("MODIFIED", "101")]
    assert new.changes[0][3] == PodConverter()(base_pod("101"))


def test_go_escaped_text_in_a_listed_pod_costs_one_conversion_at_its_next_watch_line() -> None:
    """Go writes ``<``, ``>`` and ``&`` as ``\\u003c``…: the list's hash of the parsed pod (orjson writes them
    plain) differs from the watch line's raw bytes, so the next write is converted (a cost), then skipped again."""
    pod = base_pod("100")
    pod["metadata"]["annotations"]["note"] = "a<b"
    go = line("MODIFIED", {**pod, "metadata": {**pod["metadata"], "resourceVersion": "101"}}).replace(b"<", b"\\u003c")
    side = Side(True)
    items: dict[str, PodRecord | None] = {}
    side.watcher._list_item(pod, items)
    key = f"train/{pod['metadata']['name']}"
    rec = items[key]
    assert rec is not None
    side.state.apply(Change(ChangeType.ADDED, "pods", key, rec, None, True, 0.0))
    side.feed(go)
    assert [c[0].value for c in side.changes] == ["MODIFIED"]
    side.feed(go.replace(b'"resourceVersion":"101"', b'"resourceVersion":"102"'))
    assert side.changes == []


def test_the_converter_reads_only_the_parts_the_typed_way_hands_it() -> None:
    """PodLines converts a slice of the pod (metadata's read fields, spec.nodeName and restartPolicy, the status):
    a converter that read anything else would see it missing. Every key the converter reads of a full pod's
    metadata, spec and top level is in that slice."""
    read: set[tuple[str, str]] = set()

    class Reading(dict[str, Any]):
        def __init__(self, where: str, d: dict[str, Any]) -> None:
            super().__init__(d)
            self.where = where

        def get(self, key: str, default: Any = None) -> Any:
            read.add((self.where, key))
            return super().get(key, default)

        def __getitem__(self, key: str) -> Any:
            read.add((self.where, key))
            return super().__getitem__(key)

        def __contains__(self, key: object) -> bool:
            read.add((self.where, str(key)))
            return super().__contains__(key)

    pod = base_pod("100")
    obj = Reading(
        "pod", {**pod, "metadata": Reading("metadata", pod["metadata"]), "spec": Reading("spec", pod["spec"])}
    )
    assert isinstance(PodConverter()(obj), PodRecord)
    sliced = {
        ("pod", "metadata"), ("pod", "spec"), ("pod", "status"),
        *(("metadata", k) for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp",
                                     "deletionTimestamp", "labels", "annotations", "ownerReferences")),
        ("spec", "nodeName"), ("spec", "restartPolicy"),
    }  # fmt: skip
    assert read <= sliced, read - sliced


def test_a_list_page_is_still_read_whole() -> None:
    """The list path is not typed: its items arrive parsed (ListPage) and are hashed by pod_input_hash."""
    page = ListPage([base_pod("100")], "100", "")
    side = Side(True)
    items: dict[str, PodRecord | None] = {}
    for obj in page.items:
        side.watcher._list_item(obj, items)
    assert side.whole_conversions == 1


_TEXT = st.text(alphabet='ab<&\u00e9\u2028\n"\\', max_size=4)
_MAPS = st.dictionaries(_TEXT, _TEXT, max_size=3).map(lambda d: dict(sorted(d.items())))
_STATUS = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | _TEXT,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3).map(lambda d: dict(sorted(d.items())))
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.tuples(_MAPS, _MAPS, _STATUS, st.sampled_from(["n1", "n2", None])), min_size=2, max_size=2),
    same=st.booleans(),
)
def test_the_raw_hash_is_equal_exactly_when_the_read_parts_are(
    parts: list[tuple[Any, Any, Any, Any]], same: bool
) -> None:
    """Random labels, annotations, status and node (half the time the second pod's a copy of the first's), written
    in one key order: equal hashes exactly for equal parts, and the raw hash equals pod_input_hash of the parsed line
    (the list's) for this compact JSON."""
    if same:
        parts[1] = copy.deepcopy(parts[0])
    hashes = []
    for labels, notes, status, node in parts:
        pod = base_pod("100")
        pod["metadata"]["labels"] = labels
        pod["metadata"]["annotations"] = notes
        pod["status"] = status
        pod["spec"]["nodeName"] = node
        data = line("MODIFIED", pod)
        hashes.append(raw_hash(data))
        assert hashes[-1] == pod_input_hash(json.loads(data)["object"])
    assert (hashes[0] == hashes[1]) == (json.dumps(parts[0]) == json.dumps(parts[1]))  # as JSON: 1 is not true
