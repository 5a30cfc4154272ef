"""`fault-agent detect -f FILE [--json]`: what does the agent make of this object?

Reads ConfigMaps and Nodes as ``kubectl get cm|node -o yaml|json`` prints them (one object, a ``List`` of them,
several YAML documents, or a directory of such files; ``-`` reads standard input). A Node goes through the agent's
Node converter and node detector (its problem conditions, GPU ones with their XIDs: agent.core.detect.gpu; a node
not Ready is reported only once ``detect.node_not_ready_grace_s`` has passed, which one reading never shows). The
ConfigMaps run through the agent's own detection path: :func:`agent.sources.configmaps.convert_configmap`, then
:class:`agent.engine.detecting.DetectPipeline`, which
routes each object to its detector as the watchers would (device plugin ``mindx-dl-deviceinfo-*``, NodeD
``mindx-dl-nodeinfo-*``, ClusterD ``cluster-info-*``, public faults labelled ``mc-consumer-publicfault=true``, the
level table ``mindx-dl-fault-config``). Objects are read in order, so a second version of the same ConfigMap is an
update of the first (its faults that went away are listed as cleared). An object is read only when ``fault-agent
run`` with the same settings would read it (see :func:`route`): one fault source, ``kube.fault_source``
(agent.core.fault_source), ClusterD's ``cluster-info-*`` or the per-node and public-fault ConfigMaps, never both;
``auto`` chooses ClusterD's when the input holds one of its ConfigMaps (labelled ``mx-consumer-volcano=true`` in
``kube.node_info_namespace``), as ``run`` does from the cluster; each source only in its namespace
(``kube.device_info_namespace``, ``kube.node_info_namespace``, ``kube.fault_config_namespace``,
``kube.public_fault_namespaces``); any other is an ``unwatched`` rejection naming the setting. A ConfigMap without a
namespace counts as in the watched one.

``--json`` prints exactly one JSON object::

    {"faults":   [{"kind": "chip|network|node|switch|public", "level": "<level name>", "node": str,
                   "chips": [str], "codes": [str], "reason": str, "check_code_ok": true|false|null,
                   "detail": str, "devices": [str]}],
     "cleared":  [same shape],
     "rejections": [{"source": "ns/name", "reason": "<slug>", "detail": str}]}

``kind`` is the fault's kind, except ``switch`` for an A3 switch fault (a node fault, reason ``SwitchFault``) and
``public`` for a public fault (reason ``PublicFault…``). ``level`` is the reporter's name of the level: NodeD's
(``SeparateFault``, ``PreSeparateFault``, ``NotHandleFault``) for a NodeD fault, else the chip level's
(``SeparateNPU``, …), as in the agent's events. ``check_code_ok`` is null when the fault's data carries
no CheckCode (ClusterD entries, ``SwitchInfoCfg``, ``ManuallySeparateNPU``, public faults, Kubernetes objects).

The agent's settings (``--config`` before or after the subcommand, ``FAULT_AGENT_*``) apply, e.g. ``detect.*``.
Exit codes: 0 when the input was read (rejections included), 2 when a file is unreadable or not YAML/JSON, or
the settings are invalid. In a directory each such file is a rejection of its own (source its path, reason
``unreadable-file``), the other files are still detected and the exit code is 2 after the report.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import yaml

from agent.core.cluster import ConfigMapRecord, NodeRecord
from agent.core.detect.levels import level_name
from agent.core.fault_source import FaultSource
from agent.core.faults import Fault, FaultCleared, ObjectRef, Rejection

if TYPE_CHECKING:
    from agent.settings import KubeSettings

EXIT_OK = 0
EXIT_UNREADABLE = 2
# the times `--now` may take: the detectors' plausibility window (2000 onwards, up to a day ahead) must stay
# representable
NOW_RANGE = (datetime(2000, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC))
_SUFFIXES = (".json", ".yaml", ".yml")


class Unreadable(Exception):
    """A file that cannot be read or is not YAML/JSON."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``detect`` arguments."""
    parser.add_argument(
        "-f", "--filename", required=True, help="ConfigMap or Node file, List, directory, or - for stdin"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--fault-config",
        metavar="FILE",
        help="a level table to apply first: the mindx-dl-fault-config ConfigMap, or its faultCode.json content",
    )
    parser.add_argument(
        "--now",
        metavar="RFC3339",
        help="read the objects as of this instant (default: the current time); timestamps more than a day "
        "after it are rejected as implausible",
    )
    parser.set_defaults(func=main)


def _documents(text: str, what: str) -> list[Any]:
    """The documents of one file's `text`: one JSON document, or a YAML stream (empty documents dropped).

    A document nested too deep to parse at all (more than 1,024 levels of JSON, or a YAML node more than
    :data:`~agent.core.detect.nesting.MAX_NESTING` levels deep) makes the file unreadable; a shallower one that
    is still too deep is returned and refused on its own by :func:`detect_objects` (the other objects of a List
    are still read).

    Raises:
        Unreadable: neither JSON nor YAML, or nested too deep to parse (the message says so).
    """
    from agent.core.detect.nesting import NestingError, too_deep_message, yaml_load_all

    try:
        docs = [orjson.loads(text)]
    except orjson.JSONDecodeError as e:
        if "depth" in e.msg:  # orjson stops at 1,024 levels; YAML would only recurse deeper
            raise Unreadable(f"{what}: {too_deep_message()}") from e
        try:
            docs = [d for d in yaml_load_all(text) if d is not None]
        except NestingError as e:
            raise Unreadable(f"{what}: {e}") from e
        except yaml.YAMLError as e:
            raise Unreadable(f"{what}: neither JSON nor YAML: {str(e).splitlines()[0]}") from e
    return docs


def _read_text(path: str) -> str:
    """The UTF-8 text of `path` (``-`` = stdin).

    Raises:
        Unreadable: missing, unreadable, or not UTF-8 text; the message starts with `path`.
    """
    try:
        if path == "-":
            return sys.stdin.read()
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise Unreadable(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise Unreadable(f"{path}: {e.strerror or e}") from e


def read_each(path: str) -> tuple[list[Any], list[tuple[str, Unreadable]]]:
    """The objects in `path` (``-`` = stdin; a directory: its .json/.yaml/.yml files in name order), Lists
    flattened into their items, and the files that could not be read, each as (its path, the error).

    A directory's unreadable file (missing, not UTF-8, neither JSON nor YAML, a symbolic link to nothing) is
    skipped and listed; the other files are still read. A `path` that is a single file either gives objects or
    one listed error. A YAML or JSON document that is a list is read item by item, as a ``kind: List``.
    """
    what = "<stdin>" if path == "-" else path
    names = [what]
    out: list[Any] = []
    bad: list[tuple[str, Unreadable]] = []
    if path != "-" and Path(path).is_dir():
        try:
            entries = [p for p in sorted(Path(path).iterdir()) if p.suffix in _SUFFIXES]
            names = [str(p) for p in entries if p.is_file()]
            for p in entries:
                if p.is_symlink() and not p.exists():  # is_file() is False for it: say so rather than skip it
                    bad.append((str(p), Unreadable(f"{p}: a symbolic link to {_link_target(p)!r}, which is missing")))
        except OSError as e:
            return [], [(path, Unreadable(f"{path}: {e.strerror or e}"))]
    for name in names:
        try:
            docs = _documents(_read_text("-" if name == "<stdin>" else name), name)
        except Unreadable as e:
            bad.append((name, e))
            continue
        for doc in docs:
            out.extend(_flatten(doc))
    return out, bad


def _link_target(p: Path) -> str:
    try:
        return str(p.readlink())
    except OSError:
        return "?"


def read_objects(path: str) -> list[Any]:
    """The objects in `path`, as :func:`read_each` reads them, all or nothing.

    Raises:
        Unreadable: the first missing or unreadable file, or one that is neither JSON nor YAML.
    """
    out, bad = read_each(path)
    if bad:
        raise bad[0][1]
    return out


_LIST_NESTING = 4
"""Lists inside Lists are opened this many levels deep; a deeper one is passed on whole (and refused)."""


def _flatten(doc: Any, depth: int = 0) -> Iterator[Any]:
    """`doc`'s objects: the items of a ``kind: …List`` (``kubectl get -o yaml``) or of a plain list (a
    hand-written YAML sequence of ConfigMaps), else `doc` itself."""
    if depth < _LIST_NESTING and isinstance(doc, list):
        for item in doc:
            yield from _flatten(item, depth + 1)
    elif (
        depth < _LIST_NESTING
        and isinstance(doc, dict)
        and isinstance(doc.get("items"), list)
        and str(doc.get("kind", "")).endswith("List")
    ):
        for item in doc["items"]:
            yield from _flatten(item, depth + 1)
    else:
        yield doc


def _yaml_typed_data(obj: dict[str, Any]) -> Rejection | None:
    """A ``wrong-type`` rejection that says to quote it, for a ConfigMap whose ``data`` has a value YAML read as
    something other than a string (an unquoted time, number or boolean in a hand-written file); else None."""
    data = obj.get("data")
    if not isinstance(data, dict):
        return None
    for key, value in data.items():
        if isinstance(value, str) or value is None:
            continue
        if isinstance(value, datetime | date):
            shown, what = value.isoformat(), "a timestamp"
        elif isinstance(value, bool | int | float):
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            what = "a boolean" if isinstance(value, bool) else "an integer" if isinstance(value, int) else "a number"
        else:
            continue  # an object or array: convert_configmap's own rejection says what it is
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        ref = ObjectRef("ConfigMap", str(meta.get("namespace", "")), str(meta.get("name", "")))
        k, v = str(key)[:40], shown[:40]
        detail = f'data.{k}: YAML read {v} as {what}, not a string; quote it: {k}: "{v}"'
        return Rejection(ref, "wrong-type", detail)
    return None


def route(rec: ConfigMapRecord, kube: KubeSettings, fault_source: FaultSource | None = None) -> str | Rejection:
    """The watch source through which ``fault-agent run`` with settings `kube` would read `rec`, or an
    ``unwatched`` rejection whose detail names the setting (or selector) that keeps it out.

    Uses :data:`agent.sources.watchers.CONFIGMAP_SOURCES`, the table the watchers are built from: a source
    reads `rec` when it is enabled, `rec`'s name has its prefix (or is its one name), `rec` carries its
    labels, and `rec` is in its namespace. A ConfigMap with no namespace (a hand-written file; ``kubectl get
    -o yaml`` always prints one) counts as being in the namespace the source watches. A public-fault label
    wins over a name, as before.
    """
    from agent.sources.watchers import CONFIGMAP_SOURCES

    labels = dict(rec.labels)
    candidates = [
        cm
        for cm in CONFIGMAP_SOURCES
        if (rec.name.startswith(cm.name_prefix) and (not cm.name or rec.name == cm.name))
        and (cm.name_prefix or cm.name or cm.labels_match(labels))
    ]
    candidates.sort(key=lambda cm: bool(cm.name_prefix or cm.name))  # label-only sources first
    ref = ObjectRef("ConfigMap", rec.namespace, rec.name, rec.uid)
    if not candidates:
        return Rejection(ref, "unwatched", "no agent source reads a ConfigMap of this name or label")
    why: list[str] = []
    for cm in candidates:
        what = f"{cm.name_prefix}*" if cm.name_prefix else cm.name or f"ConfigMaps labelled {cm.label_selector}"
        if not cm.enabled(kube, fault_source):
            why.append(cm.why_off(kube, fault_source))
            continue
        if not cm.labels_match(labels):
            why.append(f"run reads {what} only with label {cm.label_selector}")
            continue
        watched = cm.namespaces(kube)
        if rec.namespace and None not in watched and rec.namespace not in watched:
            where = ",".join(ns for ns in watched if ns is not None)
            why.append(f"run reads {what} only in kube.{cm.namespace_setting}={where}")
            continue
        return cm.source
    return Rejection(ref, "unwatched", "; ".join(why))


def input_fault_source(objects: list[Any], kube: KubeSettings) -> FaultSource:
    """The fault source ``run`` would use if the cluster held `objects`: ``kube.fault_source``, ``auto`` resolved
    as at start (agent.core.fault_source): ClusterD's when one object is a ConfigMap ``cluster-info-*`` labelled
    ``mx-consumer-volcano=true`` in ``kube.node_info_namespace`` (or without a namespace)."""
    from agent.core.fault_source import CLUSTERD_LABEL, choose_fault_source
    from agent.sources.configmaps import CLUSTER_INFO_PREFIX

    key, _, value = CLUSTERD_LABEL.partition("=")
    found = []
    for obj in objects:
        meta = obj.get("metadata") if isinstance(obj, dict) and obj.get("kind", "ConfigMap") == "ConfigMap" else None
        if not isinstance(meta, dict) or not str(meta.get("name", "")).startswith(CLUSTER_INFO_PREFIX):
            continue
        labels = meta.get("labels")
        if isinstance(labels, dict) and labels.get(key) == value and meta.get("namespace") in (
            None, "", kube.node_info_namespace,
        ):  # fmt: skip
            found.append(str(meta["name"]))
    return choose_fault_source(kube.fault_source, found, kube.node_info_namespace).source


def display_kind(fault: Fault) -> str:
    """``switch`` / ``public`` for those faults, else the fault's kind (see the module docstring)."""
    from agent.core.detect.switchinfo import SWITCH_REASON

    if fault.reason == SWITCH_REASON:
        return "switch"
    if fault.reason.startswith("PublicFault"):
        return "public"
    return fault.kind.value


def _check_code(fault: Fault) -> bool | None:
    from agent.core.detect.deviceinfo import DEVICE_INFO_PREFIX
    from agent.core.detect.nodeinfo import NODE_INFO_PREFIX

    name = fault.source.name
    if fault.reason in ("SwitchFault", "ManuallySeparateNPU") or not name.startswith(
        (DEVICE_INFO_PREFIX, NODE_INFO_PREFIX)
    ):
        return None
    return fault.check_code_ok


def fault_json(fault: Fault) -> dict[str, Any]:
    """One fault in the ``--json`` shape."""
    return {
        "kind": display_kind(fault),
        "level": level_name(fault),
        "node": fault.node,
        "chips": list(fault.chips),
        "codes": list(fault.codes),
        "reason": fault.reason,
        "check_code_ok": _check_code(fault),
        "detail": fault.detail,
        "devices": list(fault.devices),
    }


def _ref(ref: ObjectRef) -> str:
    return f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name


def _fault_config(path: str) -> dict[str, Any]:
    """`path` as a raw ConfigMap dict: the ConfigMap itself, or a faultCode.json document wrapped into one."""
    from agent.core.detect.levels import FAULT_CONFIG_KEY, FAULT_CONFIG_NAME
    from agent.core.detect.nesting import too_deep, too_deep_message

    docs = read_objects(path)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise Unreadable(f"{path}: expected one ConfigMap or one faultCode.json object")
    if too_deep(docs[0]):
        raise Unreadable(f"{path}: {too_deep_message()}")
    doc: dict[str, Any] = docs[0]
    if doc.get("kind") == "ConfigMap":
        return doc
    return {
        "kind": "ConfigMap",
        "metadata": {"name": FAULT_CONFIG_NAME, "namespace": "kube-system"},
        "data": {FAULT_CONFIG_KEY: orjson.dumps(doc).decode()},
    }


def _with_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of `obj` with the server-set metadata a hand-written file lacks (uid, resourceVersion)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or ("uid" in meta and "resourceVersion" in meta):
        return obj
    return {**obj, "metadata": {"uid": "local-file", "resourceVersion": "0", **meta}}


class _Collected:
    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self.cleared: list[FaultCleared] = []
        self.rejections: list[Rejection] = []


def detect_objects(
    objects: list[Any], now: datetime, fault_config: dict[str, Any] | None = None, settings: Any = None
) -> _Collected:
    """Run `objects` (raw ConfigMap dicts) through the agent's detection pipeline as of `now`.

        Returns the faults, cleared faults and rejections in the order the detectors produced them. Objects that
        are not ConfigMaps (``not-a-configmap``) or that ``run`` with `settings` would not read (``unwatched``, see
    :func:`route`) are rejections. `settings` is an :class:`agent.settings.Settings`; None means the defaults.
    """
    from agent.core.clock import FixedClock
    from agent.core.detect.common import json_type
    from agent.core.detect.nesting import too_deep, too_deep_message
    from agent.engine.detecting import DetectPipeline
    from agent.kube.watch import Change, ChangeType
    from agent.settings import Settings
    from agent.sources.configmaps import convert_configmap
    from agent.sources.nodes import NodeConverter
    from agent.sources.state import ClusterState

    got = _Collected()

    class Recording(DetectPipeline):
        def _emit(self, result: Any, source: str) -> None:
            got.faults.extend(result.faults)
            got.cleared.extend(result.cleared)
            got.rejections.extend(result.rejections)

    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    pipeline_settings = settings or Settings.model_validate({})
    pipeline = Recording(pipeline_settings, ClusterState(), queue, clock=FixedClock(now))
    fault_source = input_fault_source(objects, pipeline_settings.kube)
    seen: dict[tuple[str, str], ConfigMapRecord] = {}
    seen_nodes: dict[str, NodeRecord] = {}
    kube = pipeline_settings.kube
    nodes = NodeConverter(tuple(kube.node_label_keys), tuple(kube.npu_resource_names))
    for obj in ([fault_config] if fault_config is not None else []) + objects:
        if too_deep(obj):  # before anything recurses into it; its metadata is read shallowly
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            ns = meta.get("namespace") if isinstance(meta, dict) else None
            ref = ObjectRef("Object", ns if isinstance(ns, str) else "", name if isinstance(name, str) else "")
            got.rejections.append(Rejection(ref, "too-deep", f"the object is {too_deep_message()}"))
            continue
        if not isinstance(obj, dict):
            what = json_type(obj)
            shown = orjson.dumps(obj, default=str).decode()[:40]
            detail = f"a{'n' * (what[0] in 'aeiou')} {what} is not a Kubernetes object: {shown}"
            got.rejections.append(Rejection(ObjectRef("Object", "", ""), "not-a-configmap", detail))
            continue
        if obj.get("kind") == "Node":
            node = nodes(_with_defaults(obj))
            if isinstance(node, Rejection):
                got.rejections.append(node)
                continue
            old_node = seen_nodes.get(node.name)
            seen_nodes[node.name] = node
            change_type = ChangeType.ADDED if old_node is None else ChangeType.MODIFIED
            pipeline(Change(change_type, "nodes", node.name, node, old_node, False, now.timestamp()))
            continue
        if obj.get("kind", "ConfigMap") != "ConfigMap":
            kind = obj.get("kind", "?")
            meta = obj.get("metadata")
            name = str(meta.get("name", "")) if isinstance(meta, dict) else ""
            ref = ObjectRef(str(kind), str(meta.get("namespace", "")) if isinstance(meta, dict) else "", name)
            got.rejections.append(Rejection(ref, "not-a-configmap", f"kind {str(kind)[:40]!r} is not ConfigMap"))
            continue
        if (typed := _yaml_typed_data(obj)) is not None:
            got.rejections.append(typed)
            continue
        rec = convert_configmap(_with_defaults(obj))
        if isinstance(rec, Rejection):
            got.rejections.append(rec)
            continue
        source = route(rec, pipeline_settings.kube, fault_source)
        if isinstance(source, Rejection):
            got.rejections.append(source)
            continue
        key = (rec.namespace, rec.name)
        old = seen.get(key)
        seen[key] = rec
        change_type = ChangeType.ADDED if old is None else ChangeType.MODIFIED
        pipeline(Change(change_type, source, f"{rec.namespace}/{rec.name}", rec, old, False, now.timestamp()))
    return got


def _text(got: _Collected) -> str:
    lines: list[str] = []

    def describe(f: Fault) -> str:
        chips = ",".join(f.chips) or "-"
        codes = ",".join(f.codes) or "-"
        ok = _check_code(f)
        cc = "n/a" if ok is None else ("ok" if ok else "MISMATCH")
        return (
            f"{display_kind(f):7} {level_name(f):19} node={f.node or '-'} chips={chips} codes={codes} "
            f"reason={f.reason or '-'} check-code={cc} source={_ref(f.source)}"
            + (f" devices={','.join(f.devices)}" if f.devices else "")
            + (f" detail={f.detail!r}" if f.detail else "")
        )

    lines += [f"fault    {describe(f)}" for f in got.faults]
    lines += [f"cleared  {describe(c.fault)}" for c in got.cleared]
    lines += [f"rejected {_ref(r.source)}: {r.reason}: {r.detail}" for r in got.rejections]
    lines.append(f"{len(got.faults)} fault(s), {len(got.cleared)} cleared, {len(got.rejections)} rejection(s)")
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    """Run ``detect``; returns the exit code: 0 read (rejections included), 2 unreadable input, no objects at
    all, a `--now` outside :data:`NOW_RANGE`, or a detector that failed (the report may then miss faults).

    In a directory, each unreadable file is a rejection (source its path, reason ``unreadable-file``) and the
    other files are still detected; the exit code is then 2, after the report."""
    try:
        now = datetime.fromisoformat(args.now) if args.now else datetime.now(UTC)
    except ValueError:
        print(f"fault-agent detect: --now {args.now!r} is not an RFC 3339 time", file=sys.stderr)
        return EXIT_UNREADABLE
    if now.tzinfo is None:
        print(f"fault-agent detect: --now {args.now!r} has no time zone", file=sys.stderr)
        return EXIT_UNREADABLE
    if not NOW_RANGE[0] <= now <= NOW_RANGE[1]:
        print(
            f"fault-agent detect: --now {args.now!r} is outside {NOW_RANGE[0].year}-{NOW_RANGE[1].year}",
            file=sys.stderr,
        )
        return EXIT_UNREADABLE
    from agent.settings import SettingsError, load_settings

    try:
        settings = load_settings(getattr(args, "config", None))  # detect.* settings apply as in the agent
    except SettingsError as e:
        print(f"fault-agent detect: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        fault_config = _fault_config(args.fault_config) if args.fault_config else None
    except Unreadable as e:
        print(f"fault-agent detect: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    objects, unreadable = read_each(args.filename)
    if unreadable and (
        args.filename == "-" or not Path(args.filename).is_dir()
    ):  # one file or stdin: nothing else to report
        print(f"fault-agent detect: {unreadable[0][1]}", file=sys.stderr)
        return EXIT_UNREADABLE
    if (
        not objects and not unreadable
    ):  # an empty pipe (a failed `kubectl get … |`) must not read as an all-healthy cluster
        print(f"fault-agent detect: no objects in {args.filename}", file=sys.stderr)
        return EXIT_UNREADABLE
    from structlog.testing import capture_logs

    with capture_logs() as logs:  # stdout is the report: the detectors' own log lines go to stderr, warnings up
        got = detect_objects(objects, now.astimezone(UTC), fault_config, settings)
    for name, error in unreadable:  # a directory's bad file: reported by its own path, the others still read
        detail = str(error).removeprefix(f"{name}: ")
        got.rejections.append(Rejection(ObjectRef("File", "", name), "unreadable-file", detail))
    for entry in logs:
        if entry.get("log_level") in ("warning", "error", "critical"):
            print(f"fault-agent detect: {entry.get('log_level')}: {entry}", file=sys.stderr)
    if args.json:
        doc = {
            "faults": [fault_json(f) for f in got.faults],
            "cleared": [fault_json(c.fault) for c in got.cleared],
            "rejections": [{"source": _ref(r.source), "reason": r.reason, "detail": r.detail} for r in got.rejections],
        }
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
    else:
        sys.stdout.write(_text(got))
    if unreadable:
        print(f"fault-agent detect: {len(unreadable)} file(s) could not be read (rejections above)", file=sys.stderr)
        return EXIT_UNREADABLE
    if any(entry.get("event") == "detector failed" for entry in logs):
        print("fault-agent detect: a detector failed (above): the report may miss faults", file=sys.stderr)
        return EXIT_UNREADABLE
    return EXIT_OK
