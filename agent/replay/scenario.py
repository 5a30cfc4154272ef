"""Scenario files: a YAML list of timed steps that tests, bug reports and what-ifs share.

::

    - at: 0s
      apply: {apiVersion: v1, kind: ConfigMap, metadata: {name: mindx-dl-deviceinfo-n1, namespace: kube-system}, ...}
    - at: 1.5s
      patch: {resource: nodes, name: n1, patch: {metadata: {labels: {x: "y"}}}}
    - at: 2m
      delete: {resource: pods, namespace: train, name: job-0}

- ``at``: time from the scenario's start: a number of seconds or ``<number><unit>`` with unit ``ms``, ``s``,
  ``m`` or ``h`` (``"1.5s"``, ``"200ms"``); steps are in time order (equal times keep file order).
- ``apply``: a whole object (``apiVersion``, ``kind``, ``metadata.name``, ``metadata.namespace`` for namespaced
  kinds): created, or replaced when it exists.
- ``delete``: ``{resource, namespace, name}``; ``patch``: ``{resource, namespace, name, patch}``, ``patch`` a JSON
  merge patch (RFC 7386). ``namespace`` is left out for nodes.
- ``resource``: ``pods``, ``nodes``, ``configmaps``, ``vcjobs`` (Volcano ``batch.volcano.sh/v1alpha1`` Job),
  ``acjobs`` (``mindxdl.gitee.com/v1`` AscendJob), ``podgroups`` (``scheduling.volcano.sh/v1beta1`` PodGroup):
  the names of recording lines (agent.kube.record).

The JSON Schema is :data:`SCHEMA` (a copy in ``config/scenario.schema.json``); :func:`load_scenario` checks it and
the rest (time order, known kinds, namespaces) and names the step and its line in each error.
:func:`export_scenario` turns recording lines into steps: each object's first appearance is an ``apply``, each
later change an ``apply`` of its new state, a deletion a ``delete``; a re-list's unchanged objects are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
import yaml

from agent.core.detect.common import json_type
from agent.core.detect.nesting import yaml_compose, yaml_load
from agent.sources.catalog import CATALOG


@dataclass(frozen=True, slots=True)
class Kind:
    """How one scenario/recording resource maps to the API."""

    resource: str
    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def collection_path(self, namespace: str | None) -> str:
        """``/api/v1/namespaces/<ns>/pods`` or ``/api/v1/nodes``."""
        group_version = self.api_version
        base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        return f"{base}/namespaces/{namespace}/{self.plural}" if self.namespaced else f"{base}/{self.plural}"


KINDS: dict[str, Kind] = {
    resource: Kind(resource, s.api_version, s.kind, s.plural, s.namespaced)
    for s in CATALOG
    for resource in ["configmaps" if s.kind == "ConfigMap" else s.name]
}
"""Scenario resource → its API: each watched source of agent.sources.catalog, the ConfigMap sources as one
``configmaps`` (a scenario writes objects; which source reads a ConfigMap is the watch's business)."""
_BY_KIND = {(k.api_version, k.kind): k for k in KINDS.values()}

_DURATION = r"^[0-9]+(\.[0-9]+)?(ms|s|m|h)$"
_TARGET: dict[str, Any] = {
    "type": "object",
    "required": ["resource", "name"],
    "properties": {
        "resource": {"enum": sorted(KINDS)},
        "namespace": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
    },
}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://fault-agent.invalid/schemas/scenario.schema.json",
    "title": "fault-agent scenario file",
    "description": "A list of timed steps applied to a cluster (agent.replay.scenario).",
    "type": "array",
    "items": {
        "type": "object",
        "required": ["at"],
        "minProperties": 2,
        "maxProperties": 2,
        "properties": {
            "at": {"oneOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": _DURATION}]},
            "apply": {
                "type": "object",
                "required": ["apiVersion", "kind", "metadata"],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string", "minLength": 1}, "namespace": {"type": "string"}},
                    },
                },
            },
            "delete": {**_TARGET, "additionalProperties": False},
            "patch": {
                **_TARGET,
                "required": ["resource", "name", "patch"],
                "properties": {**_TARGET["properties"], "patch": {"type": "object"}},
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class ScenarioError(ValueError):
    """A scenario file is wrong. `problems` lists each as ``"<file>:<line>: step <i>: <what>"`` (0-based step)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class Step:
    """One step: at `at_s` seconds, `op` (apply | delete | patch) on `kind`/`namespace`/`name`.

    `body` is the object for apply, the merge patch for patch, None for delete. `line` is its line in the file.
    """

    at_s: float
    op: str
    kind: Kind
    namespace: str | None
    name: str
    body: dict[str, Any] | None
    line: int


def parse_duration(value: float | int | str) -> float:
    """Seconds from ``1.5`` / ``"1.5s"`` / ``"200ms"`` / ``"2m"`` / ``"1h"``. Raises ValueError when malformed."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration is not negative: {value!r}")
        return float(value)
    m = re.match(_DURATION, value)
    if m is None:
        raise ValueError(f"not a duration (use e.g. 1.5s, 200ms, 2m): {value!r}")
    return float(value[: -len(m.group(2))]) * _UNITS[m.group(2)]


def format_duration(seconds: float) -> str:
    """``"1.5s"`` / ``"0.25s"``: the shortest seconds form, millisecond precision."""
    return f"{round(seconds, 3):g}s"


def load_scenario(text: str, *, filename: str = "<scenario>") -> list[Step]:
    """Parse and check a scenario file's text; returns its steps in file order.

    Raises:
        ScenarioError: not YAML, not a list, a step that breaks the schema, an unknown apiVersion/kind, a
            namespaced object without a namespace (or a node with one), or a step earlier than the one before it.
            Every problem is listed, each with its line and step index.
    """
    try:
        root = yaml_compose(text)  # both refuse a document nested too deep for PyYAML's recursion
        data = yaml_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"{filename}:{mark.line + 1}" if mark is not None else filename
        raise ScenarioError([f"{at}: not valid YAML: {getattr(e, 'problem', None) or e}"]) from e
    if data is None:
        data = []
    if not isinstance(data, list):
        raise ScenarioError([f"{filename}:1: a scenario is a list of steps, got {json_type(data)}"])
    lines = [n.start_mark.line + 1 for n in root.value] if isinstance(root, yaml.SequenceNode) else []
    problems: list[str] = []

    def where(index: int | None) -> str:
        if index is None or index >= len(lines):
            return f"{filename}:1"
        return f"{filename}:{lines[index]}: step {index}"

    for err in sorted(_VALIDATOR.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        path = list(err.absolute_path)
        index = path[0] if path and isinstance(path[0], int) else None
        field = ".".join(str(p) for p in path[1:])
        message = err.message
        if err.validator in ("minProperties", "maxProperties"):
            message = "a step has 'at' and exactly one of 'apply', 'delete', 'patch'"
        problems.append(f"{where(index)}: {field + ': ' if field else ''}{message}")
    if problems:
        raise ScenarioError(problems)
    steps: list[Step] = []
    last = 0.0
    for i, raw in enumerate(data):
        try:
            step = _step(raw, lines[i] if i < len(lines) else 1)
        except ValueError as e:
            problems.append(f"{where(i)}: {e}")
            continue
        if step.at_s < last:
            problems.append(f"{where(i)}: at {raw['at']!r} is earlier than the step before ({format_duration(last)})")
        last = max(last, step.at_s)
        steps.append(step)
    if problems:
        raise ScenarioError(problems)
    return steps


def _step(raw: Mapping[str, Any], line: int) -> Step:
    at = parse_duration(raw["at"])
    if "apply" in raw:
        obj = raw["apply"]
        kind = _BY_KIND.get((obj["apiVersion"], obj["kind"]))
        if kind is None:
            known = ", ".join(f"{k.api_version} {k.kind}" for k in KINDS.values())
            raise ValueError(f"apply: unknown kind {obj['apiVersion']} {obj['kind']} (known: {known})")
        meta = obj["metadata"]
        ns = meta.get("namespace")
        _check_namespace(kind, ns, "apply.metadata.namespace")
        return Step(at, "apply", kind, ns, meta["name"], dict(obj), line)
    op = "delete" if "delete" in raw else "patch"
    target = raw[op]
    kind = KINDS[target["resource"]]
    ns = target.get("namespace")
    _check_namespace(kind, ns, f"{op}.namespace")
    return Step(at, op, kind, ns, target["name"], dict(target["patch"]) if op == "patch" else None, line)


def _check_namespace(kind: Kind, ns: str | None, field: str) -> None:
    if kind.namespaced and not ns:
        raise ValueError(f"{field}: a {kind.kind} is namespaced: give its namespace")
    if not kind.namespaced and ns:
        raise ValueError(f"{field}: a {kind.kind} has no namespace")


def dump_scenario(steps: Iterable[Mapping[str, Any]]) -> str:
    """YAML text of raw steps (``{at, apply|delete|patch}``), one list item per step, keys in file order."""
    return yaml.safe_dump(list(steps), sort_keys=False, allow_unicode=True, width=120)


_SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink")


def _clean(resource: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as a person would apply it: apiVersion/kind filled in, server-set metadata removed."""
    kind = KINDS[resource]
    meta = {k: v for k, v in dict(obj.get("metadata") or {}).items() if k not in _SERVER_FIELDS}
    out: dict[str, Any] = {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta}
    out.update({k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")})
    return out


def export_scenario(
    lines: Iterable[Mapping[str, Any]], *, from_ms: int | None = None, to_ms: int | None = None
) -> list[dict[str, Any]]:
    """Raw scenario steps from recording lines (agent.kube.record format), times relative to the first kept line.

    Lines outside [`from_ms`, `to_ms`] (Unix ms) are dropped, as are resources with no scenario kind and LISTED
    markers. A re-listed object whose resourceVersion was already seen is not repeated. Pure.
    """
    seen: dict[tuple[str, str, str], str] = {}
    steps: list[dict[str, Any]] = []
    start: int | None = None
    for ln in lines:
        t = int(ln["t"])
        resource = ln["resource"]
        if resource not in KINDS or ln["type"] == "LISTED":
            continue
        if (from_ms is not None and t < from_ms) or (to_ms is not None and t > to_ms):
            continue
        obj = ln["object"]
        meta = obj.get("metadata") or {}
        ns, name, rv = meta.get("namespace", ""), meta.get("name", ""), meta.get("resourceVersion", "")
        if not name:
            continue
        key = (resource, ns, name)
        if ln["type"] == "DELETED":
            if seen.pop(key, None) is None and from_ms is None:
                continue
            op: dict[str, Any] = {"delete": {"resource": resource, **({"namespace": ns} if ns else {}), "name": name}}
        else:
            if rv and seen.get(key) == rv:
                continue
            seen[key] = rv
            op = {"apply": _clean(resource, obj)}
        if start is None:
            start = t
        steps.append({"at": format_duration((t - start) / 1000.0), **op})
    return steps
