"""What a replay reads: recording lines (agent.kube.record) or scenario steps (agent.replay.scenario) as
:class:`Record` items, bad lines reported as :class:`InputProblem` and skipped.

:func:`read_inputs` takes recording segment files (``*.jsonl.gz``), plain JSON-lines files (``*.jsonl``),
recording folders and scenario files (``*.yaml`` / ``*.yml``), in the order given; :func:`scenario_records`
turns scenario steps into records the way an apiserver would report them (a resourceVersion per write, a UID per
object made, merge patches applied).
"""

from __future__ import annotations

import copy
import gzip
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from agent.core.detect.nesting import too_deep, too_deep_message
from agent.kube.record import TYPES, RecordError, _parse_line, list_segments
from agent.replay.scenario import KINDS, ScenarioError, Step, load_scenario

RESOURCES = tuple(sorted(KINDS))
"""The ``resource`` values a replay knows: ``acjobs``, ``configmaps``, ``jobsets``, ``leases``, ``nodes``,
``podgroups``, ``pods``, ``vcjobs``. A recording without ``podgroups`` (or ``leases``) lines, made before the agent
watched them, replays as before: those watchers are listed empty at the end of the list window (agent.replay.driver)."""

ALL_SOURCES = "*"
"""The ``source`` of a LISTED record that ends the list of every watcher (a scenario's first steps)."""

_UID_NAMESPACE = uuid.UUID("0c4c1c8e-8f4e-4d0e-9a51-2f9b3a6d7e21")


@dataclass(frozen=True, slots=True)
class Record:
    """One change as a watch delivered it.

    Attributes:
        t_ms: Unix time in milliseconds when it was seen.
        type: ``ADDED`` / ``MODIFIED`` / ``DELETED`` / ``LISTED`` (agent.kube.record.TYPES).
        resource: ``pods`` / ``nodes`` / ``configmaps`` / ``vcjobs`` / ``acjobs`` / ``podgroups`` (:data:`RESOURCES`).
        object: the raw object as the apiserver sent it (``{}`` for LISTED).
        source: the recording watcher's id (``pods@train``, ``deviceinfo@kube-system``; :data:`ALL_SOURCES` for
            every watcher), None when unknown (the replay routes the object by its namespace, name and labels).
        where: ``<file>:<line>`` for error messages ("" when made in code).
    """

    t_ms: int
    type: str
    resource: str
    object: Mapping[str, Any]
    source: str | None = None
    where: str = ""


@dataclass(frozen=True, slots=True)
class InputProblem:
    """A line or step the replay skipped: ``<file>:<line>: <what>``."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


@dataclass(slots=True)
class Problems:
    """Collects the :class:`InputProblem` items of one replay (every one is also handed to `on_problem`)."""

    items: list[InputProblem] = field(default_factory=list)
    on_problem: Callable[[InputProblem], None] | None = None

    def add(self, where: str, message: str) -> None:
        problem = InputProblem(where, message)
        self.items.append(problem)
        if self.on_problem is not None:
            self.on_problem(problem)


def check_record(rec: Record, last_t_ms: int | None, *, nesting: bool = True) -> str | None:
    """Why `rec` cannot be replayed after a record at `last_t_ms` (None: it can). Pure. `nesting` False leaves out
    the check that the object is not nested too deep (the caller makes it: agent.replay.driver checks the object's
    encoding, which it needs anyway)."""
    if rec.type not in TYPES:
        return f"'type' must be one of {', '.join(TYPES)}, got {rec.type!r}"
    if rec.type != "LISTED" and rec.resource not in KINDS:
        return f"unknown resource {rec.resource!r} (known: {', '.join(RESOURCES)})"
    if last_t_ms is not None and rec.t_ms < last_t_ms:
        return f"out of order: t {rec.t_ms} is earlier than the line before ({last_t_ms})"
    if rec.type != "LISTED":
        meta = rec.object.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            return "object without metadata.name"
        # the replay's encoder and the engine's readers would exhaust their recursion
        if nesting and too_deep(rec.object):
            return f"the object is {too_deep_message()}"
    return None


def read_inputs(paths: Iterable[Path], problems: Problems, *, scenario_start_ms: int = 0) -> Iterator[Record]:
    """The records of `paths` in the order given (a folder: its segments oldest first), lazily.

    A line that is not a JSON object with ``t``, ``type``, ``resource`` and ``object`` is reported to `problems`
    (``<file>:<line>: …``) and skipped; so is a scenario file that does not load (every problem of it) and a file
    that is neither. Record-level checks (known resource, time order) are the replay's (:func:`check_record`).
    A scenario's steps start at `scenario_start_ms` (Unix ms).
    """
    for p in paths:
        if p.is_dir():
            segments = list_segments(p)
            if not segments:
                problems.add(str(p), "a folder without recording segments (rec-*.jsonl.gz)")
            for seg in segments:
                yield from _read_lines(seg.path, problems)
        elif not p.is_file():
            problems.add(str(p), "no such file or folder")
        elif p.suffix in (".yaml", ".yml"):
            try:
                steps = load_scenario(p.read_text(encoding="utf-8"), filename=str(p))
            except (OSError, UnicodeDecodeError) as e:
                problems.add(str(p), f"cannot read: {e}")
                continue
            except ScenarioError as e:
                for text in e.problems:
                    where, _, message = text.partition(": ")
                    problems.add(where, message)
                continue
            yield from scenario_records(steps, start_ms=scenario_start_ms, filename=str(p))
        else:
            yield from _read_lines(p, problems)


def _read_lines(path: Path, problems: Problems) -> Iterator[Record]:
    try:
        with path.open("rb") as fh:
            gzipped = fh.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if gzipped else path.open("rb") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = _parse_line(path, n, line)
                except RecordError as e:
                    where, _, message = str(e).partition(f"{path}:{n}: ")
                    problems.add(f"{path}:{n}", message or where)
                    continue
                source = obj.get("source")
                yield Record(
                    obj["t"], obj["type"], obj["resource"], obj["object"],
                    source if isinstance(source, str) and source else None, f"{path}:{n}",
                )  # fmt: skip
    except (OSError, EOFError) as e:
        problems.add(str(path), f"not a readable recording: {e}")


def scenario_records(steps: Iterable[Step], *, start_ms: int = 0, filename: str = "<scenario>") -> Iterator[Record]:
    """Records for scenario `steps`: each as the watch would deliver it, at ``start_ms + at``.

    - ``apply``: ADDED for a new object, MODIFIED for an existing one (its UID kept unless the object names one).
    - ``patch``: the JSON merge patch (RFC 7386) applied to the current object, MODIFIED; a patch of a missing
      object is skipped (nothing to change, as a 404 would say).
    - ``delete``: DELETED with the last object; a missing object is skipped.
    - An object made without a ``creationTimestamp`` gets its step's time (whole seconds, as the apiserver's; an
      apply with a new UID makes a new object).
    - Every write gets the next resourceVersion (a counter, as text); an object made without a UID gets a UUID
      derived from its resource, namespace, name and how many times it was made (deterministic).
    - The steps at the first time are the initial list: a LISTED record for every watcher (:data:`ALL_SOURCES`)
      follows them.
    """
    objects: dict[tuple[str, str, str], dict[str, Any]] = {}
    made: dict[tuple[str, str, str], int] = {}
    version = 0
    first_at: float | None = None
    listed = False
    t_ms = start_ms
    for step in steps:
        if first_at is None:
            first_at = step.at_s
        t_ms = start_ms + round(step.at_s * 1000)
        if not listed and step.at_s > first_at:
            listed = True
            yield Record(start_ms + round(first_at * 1000), "LISTED", "*", {}, ALL_SOURCES, f"{filename}:{step.line}")
        resource = step.kind.resource
        key = (resource, step.namespace or "", step.name)
        where = f"{filename}:{step.line}"
        current = objects.get(key)
        if step.op == "delete":
            if current is None:
                continue
            del objects[key]
            version += 1
            gone = copy.deepcopy(current)
            gone["metadata"]["resourceVersion"] = str(version)
            yield Record(t_ms, "DELETED", resource, gone, None, where)
            continue
        if step.op == "patch":
            if current is None:
                continue
            obj = merge_patch(current, step.body or {})
        else:
            obj = copy.deepcopy(step.body or {})
        meta = obj.setdefault("metadata", {})
        if not meta.get("uid"):
            if current is not None and current["metadata"].get("uid"):
                meta["uid"] = current["metadata"]["uid"]
            else:
                made[key] = made.get(key, 0) + 1
                meta["uid"] = str(uuid.uuid5(_UID_NAMESPACE, "\x1f".join((*key, str(made[key])))))
        if not meta.get("creationTimestamp"):
            same = current is not None and current["metadata"].get("uid") == meta["uid"]
            made_at = current["metadata"].get("creationTimestamp") if same and current is not None else None
            meta["creationTimestamp"] = made_at or _rfc3339_s(t_ms)
        version += 1
        meta["resourceVersion"] = str(version)
        objects[key] = obj
        yield Record(t_ms, "MODIFIED" if current is not None else "ADDED", resource, obj, None, where)
    if not listed:
        yield Record(t_ms, "LISTED", "*", {}, ALL_SOURCES, f"{filename}:end")


def _rfc3339_s(t_ms: int) -> str:
    return datetime.fromtimestamp(t_ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """`patch` applied to `target` as a JSON merge patch (RFC 7386): objects merge, ``null`` removes, anything
    else replaces. Returns a new value; neither argument is changed. Pure."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def dumps_record(rec: Record) -> bytes:
    """The recording line (agent.kube.record format) of `rec`, with a trailing newline."""
    line: dict[str, Any] = {"t": rec.t_ms, "type": rec.type, "resource": rec.resource}
    if rec.source is not None:
        line["source"] = rec.source
    line["object"] = rec.object
    return orjson.dumps(line) + b"\n"
