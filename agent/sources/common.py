"""Helpers shared by the record converters: typed reads from raw JSON that reject instead of raising.

Converters read raw API JSON (dicts from orjson) and either return a slim record or a
:class:`~agent.core.faults.Rejection`; they never raise on bad input. Internally they raise :class:`Bad` and the
source's ``convert`` catches it once, so each field read stays one line.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from agent.core.faults import ObjectRef

intern = sys.intern


def object_ref(obj: Any, kind: str) -> ObjectRef:
    """The best ObjectRef that can be read from a possibly malformed object (for a Rejection)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return ObjectRef(kind, "", "<unknown>")
    ns = meta.get("namespace")
    name = meta.get("name")
    uid = meta.get("uid")
    return ObjectRef(
        kind,
        ns if isinstance(ns, str) else "",
        name if isinstance(name, str) and name else "<unknown>",
        uid if isinstance(uid, str) else "",
    )


class Bad(Exception):
    """Internal: a field was malformed. `reason` is the rejection slug, `detail` names the field."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def get_dict(obj: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """`obj[key]` as a dict; {} when absent or null. Raises Bad("wrong-type") for another type."""
    v = obj.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise Bad("wrong-type", f"{where}.{key} is {type(v).__name__}, want object")
    return v


def get_list(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    """`obj[key]` as a list; [] when absent or null. Raises Bad("wrong-type") for another type."""
    v = obj.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise Bad("wrong-type", f"{where}.{key} is {type(v).__name__}, want array")
    return v


def get_str(obj: dict[str, Any], key: str, where: str, default: str = "") -> str:
    """`obj[key]` as a str; `default` when absent or null. Raises Bad("wrong-type") for another type."""
    v = obj.get(key)
    if v is None:
        return default
    if not isinstance(v, str):
        raise Bad("wrong-type", f"{where}.{key} is {type(v).__name__}, want string")
    return v


def get_int(obj: dict[str, Any], key: str, where: str) -> int | None:
    """`obj[key]` as an int (bools refused); None when absent. Raises Bad("wrong-type") otherwise."""
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise Bad("wrong-type", f"{where}.{key} is {type(v).__name__}, want integer")
    return v


def str_map(obj: dict[str, Any], key: str, where: str) -> dict[str, str]:
    """`obj[key]` as a map of strings (labels, annotations, ConfigMap data).

    Raises Bad("wrong-type") when it is not an object or a value is not a string.
    """
    m = get_dict(obj, key, where)
    for k, v in m.items():
        if not isinstance(v, str):
            raise Bad("wrong-type", f"{where}.{key}[{k!r}] is {type(v).__name__}, want string")
    return m


def parse_time(text: str | None, where: str) -> datetime | None:
    """An RFC 3339 timestamp as the apiserver writes it (``2024-05-01T10:00:00Z``) → aware datetime.

    None for ""/None. Raises Bad("bad-timestamp") for anything else unparseable.
    """
    if not text:
        return None
    if not isinstance(text, str):
        raise Bad("bad-timestamp", f"{where} is {type(text).__name__}, want RFC 3339 string")
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise Bad("bad-timestamp", f"{where} {text[:40]!r} is not RFC 3339") from None
    if t.tzinfo is None:
        raise Bad("bad-timestamp", f"{where} {text[:40]!r} has no time zone")
    return t


class Metadata:
    """The metadata fields every record needs, read and checked once."""

    __slots__ = ("annotations", "created_at", "deletion", "labels", "name", "namespace", "owners", "rv", "uid")

    def __init__(self, obj: dict[str, Any], kind: str) -> None:
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise Bad("missing-metadata", f"{kind} without metadata")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise Bad("missing-metadata", f"{kind} without metadata.name")
        self.name: str = name
        self.namespace: str = intern(get_str(meta, "namespace", "metadata"))
        uid = meta.get("uid")
        rv = meta.get("resourceVersion")
        if not isinstance(uid, str) or not uid:
            raise Bad("missing-metadata", "metadata.uid missing")
        if not isinstance(rv, str) or not rv:
            raise Bad("missing-metadata", "metadata.resourceVersion missing")
        self.uid: str = uid
        self.rv: str = rv
        self.labels = str_map(meta, "labels", "metadata")
        self.annotations = str_map(meta, "annotations", "metadata")
        self.owners = get_list(meta, "ownerReferences", "metadata")
        self.created_at = parse_time(meta.get("creationTimestamp"), "metadata.creationTimestamp")
        self.deletion = parse_time(meta.get("deletionTimestamp"), "metadata.deletionTimestamp")


def controller_owner(owners: list[Any]) -> dict[str, Any] | None:
    """The ownerReference with ``controller: true``, or None. Raises Bad for a malformed entry."""
    for ref in owners:
        if not isinstance(ref, dict):
            raise Bad("wrong-type", "metadata.ownerReferences[] is not an object")
        if ref.get("controller") is True:
            return ref
    return None


class InternCache:
    """A bounded map used to share equal immutable values (chip tuples, job links) between records.

    Cleared when it reaches `limit` entries, so job churn cannot grow it without bound; sharing is an
    optimisation, never needed for correctness.
    """

    __slots__ = ("_d", "limit")

    def __init__(self, limit: int = 100_000) -> None:
        self._d: dict[Any, Any] = {}
        self.limit = limit

    def get(self, key: Any) -> Any:
        """The shared value for `key`, or None."""
        return self._d.get(key)

    def put(self, key: Any, value: Any) -> Any:
        """Remember and return `value`."""
        if len(self._d) >= self.limit:
            self._d.clear()
        self._d[key] = value
        return value
