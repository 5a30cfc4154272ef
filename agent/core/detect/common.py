"""Helpers shared by the detectors: rejections, timestamps, fault codes, results. Pure: no I/O, no clock."""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import orjson

from agent.core.detect.nesting import MAX_NESTING, too_deep, too_deep_message
from agent.core.faults import Fault, FaultCleared, FaultLevel, ObjectRef, Rejection

MAX_VALUE_BYTES = 1 << 20
"""A ConfigMap value longer than this (1 MiB, the apiserver's own object limit) is rejected unread."""

EARLIEST_SIGNAL = datetime(2000, 1, 1, tzinfo=UTC)
"""Timestamps before this are absurd (e.g. milliseconds read as seconds) and are rejected."""

MAX_FUTURE = timedelta(days=1)
"""Timestamps further than this ahead of `now` are absurd (e.g. seconds read as milliseconds)."""

_CODE = re.compile(r"[0-9A-Fa-f]{8}")
_SHORT_HEX = re.compile(r"[0-9A-Fa-f]{1,8}")
_PUBLIC_CODE = re.compile(r"[!-+\--~]{9}")
"""A public-fault code: 9 printable ASCII characters but the comma that separates codes (ClusterD's checker only
requires 9 bytes: component/clusterd/pkg/application/publicfault/checker.go ``checkFaultCode``)."""

Identity = tuple[Hashable, ...]
"""What makes two faults from the same object "the same fault" across updates."""


@dataclass(slots=True)
class Rejections:
    """Collects rejections for one object. `add` never raises."""

    source: ObjectRef
    items: list[Rejection] = field(default_factory=list)

    def add(self, reason: str, detail: str = "") -> None:
        """Record bad input: `reason` is a stable slug, `detail` a short human text (truncated to 200 chars)."""
        self.items.append(Rejection(self.source, reason, detail[:200]))


@dataclass(slots=True)
class DetectResult:
    """What one update of a watched object produced: new faults, cleared faults, rejected input."""

    faults: list[Fault] = field(default_factory=list)
    cleared: list[FaultCleared] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)

    def extend(self, other: DetectResult) -> None:
        """Append `other`'s items to this result."""
        self.faults.extend(other.faults)
        self.cleared.extend(other.cleared)
        self.rejections.extend(other.rejections)

    def __bool__(self) -> bool:
        return bool(self.faults or self.cleared or self.rejections)


def parse_json(text: str, what: str, rej: Rejections, *, limit: int | None = MAX_NESTING) -> object | None:
    """Parse a JSON document from a ConfigMap value; None (and a rejection) when it cannot be read.

    Reasons: ``value-too-large`` (over :data:`MAX_VALUE_BYTES`), ``json-truncated`` (ends mid-document),
    ``json-invalid`` (any other syntax error), ``too-deep`` (lists or objects nested more than
    :data:`~agent.core.detect.nesting.MAX_NESTING` levels, or `limit`: no MindCluster format comes close, and
    deeper data would exhaust the recursion of the code that reads it), ``wrong-type`` (the document is ``null``).
    With `limit` None only orjson's own limit (1,024 levels) applies: the caller checks the parts it reads with
    :func:`agent.core.detect.nesting.too_deep` before anything recursive touches them.
    """
    if len(text) > MAX_VALUE_BYTES:
        rej.add("value-too-large", f"{what}: {len(text)} characters, limit {MAX_VALUE_BYTES}")
        return None
    try:
        value: object = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        if "depth" in e.msg or "recursion" in e.msg:  # orjson's own limit (1,024 levels)
            rej.add("too-deep", f"{what}: {too_deep_message()}")
            return None
        if "surrogate" in e.msg:  # Go reads a lone surrogate as U+FFFD; so do we (go_loads)
            try:
                return _checked(go_loads(text, limit), what, rej, limit)
            except _TooDeepError:
                rej.add("too-deep", f"{what}: {too_deep_message()}")
                return None
            except ValueError as e2:
                rej.add("json-invalid", f"{what}: {str(e2)[:120]}")
                return None
        stripped = len(text.rstrip())
        reason = "json-truncated" if stripped == 0 or e.pos >= stripped - 1 else "json-invalid"
        rej.add(reason, f"{what}: {e.msg} at {e.pos}")
        return None
    if limit is not None and text.count("{") + text.count("[") <= limit:
        # no more brackets than levels allowed (those in strings included): it cannot nest deeper, no walk needed
        return _checked(value, what, rej, None)
    return _checked(value, what, rej, limit)


def _checked(value: object, what: str, rej: Rejections, limit: int | None) -> object | None:
    if limit is not None and too_deep(value, limit):
        rej.add("too-deep", f"{what}: {too_deep_message()}")
        return None
    if value is None:
        rej.add("wrong-type", f"{what}: null")
    return value


class _TooDeepError(ValueError):
    pass


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _go_string(text: str) -> str:
    return _SURROGATES.sub("\ufffd", text)


_SURROGATES = re.compile("[\ud800-\udfff]")


def go_loads(text: str, limit: int | None = MAX_NESTING) -> object:
    """`text` decoded as Go's ``encoding/json`` decodes it, for a document orjson refuses for a lone UTF-16
    surrogate (``"\\ud800"`` without its pair): Go writes U+FFFD for each such escape (and for a surrogate
    character that is no valid UTF-8), a valid pair is the one character it encodes. Everything else is read as
    orjson reads it: ``NaN`` and ``Infinity`` are refused, as Go refuses them.

    Raises:
        ValueError: not JSON; a subclass when it is nested more than
            :data:`~agent.core.detect.nesting.MAX_NESTING` levels (or `limit`).
    """
    import json

    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError as e:  # Python's parser recurses once per level
        raise _TooDeepError(too_deep_message()) from e
    if too_deep(value, MAX_NESTING if limit is None else limit):  # _replace_surrogates recurses
        raise _TooDeepError(too_deep_message())
    return _replace_surrogates(value)


def _replace_surrogates(value: object) -> object:
    # nested a bounded number of levels (checked before): recursion is safe here
    if isinstance(value, str):
        return _go_string(value)
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    if isinstance(value, dict):
        # a key that becomes another key after the replacement: the later one wins, as a Go map's does
        return {_go_string(k): _replace_surrogates(v) for k, v in value.items()}
    return value


_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),  # before int: a bool is an int to Python
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (tuple, "array"),
    (dict, "object"),
)


def json_type(value: object) -> str:
    """The JSON (or YAML) name of `value`'s type, for a rejection's words: ``object``, ``array``, ``string``,
    ``integer``, ``number``, ``boolean``, ``null``; Python's own type names (``dict``, ``NoneType``) mean nothing
    to the person who wrote the document."""
    if value is None:
        return "null"
    for kind, name in _JSON_TYPES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def check_time(ts: datetime, now: datetime) -> bool:
    """True when `ts` is plausible: not before 2000 and at most a day after `now`."""
    return EARLIEST_SIGNAL <= ts <= now + MAX_FUTURE


def unix_time(value: object, unit_per_s: int, what: str, now: datetime, rej: Rejections) -> datetime | None:
    """Convert a Unix timestamp (`unit_per_s` = 1 for seconds, 1000 for milliseconds) to an aware UTC datetime.

    Rejections: ``wrong-type`` (not an integer; bools refused), ``bad-timestamp`` (negative, before 2000 or more
    than a day after `now`). Returns None when rejected.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        rej.add("wrong-type", f"{what}: expected integer, got {json_type(value)}")
        return None
    lo = EARLIEST_SIGNAL.timestamp() * unit_per_s
    hi = (now + MAX_FUTURE).timestamp() * unit_per_s
    if not lo <= value <= hi:
        rej.add("bad-timestamp", f"{what}: {value} is out of range")
        return None
    return datetime.fromtimestamp(value / unit_per_s, tz=UTC)


def parse_rfc3339(value: object, what: str, now: datetime, rej: Rejections) -> datetime | None:
    """Parse an RFC 3339 timestamp (e.g. NodeD's ``updateTime``) into an aware UTC datetime, or None.

    Rejections: ``wrong-type``, ``bad-timestamp`` (unparsable, no zone, or implausible per :func:`check_time`).
    """
    if not isinstance(value, str):
        rej.add("wrong-type", f"{what}: expected string, got {json_type(value)}")
        return None
    text = value.strip()
    try:
        ts = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        rej.add("bad-timestamp", f"{what}: {text[:40]!r} is not RFC 3339")
        return None
    if ts.tzinfo is None:
        rej.add("bad-timestamp", f"{what}: {text[:40]!r} has no time zone")
        return None
    ts = ts.astimezone(UTC)
    if not check_time(ts, now):
        rej.add("bad-timestamp", f"{what}: {text[:40]!r} is out of range")
        return None
    return ts


def is_code(text: str) -> bool:
    """True for exactly 8 hex digits (any case)."""
    return _CODE.fullmatch(text) is not None


def is_public_code(text: str) -> bool:
    """True for a public-fault code: 9 printable ASCII characters but a comma (see :func:`plugin_code`)."""
    return _PUBLIC_CODE.fullmatch(text) is not None


def parse_codes(values: Iterable[object], what: str, rej: Rejections, *, plugin: bool = False) -> tuple[str, ...]:
    """Validate fault codes: 8 hex digits each, returned upper case, sorted, without duplicates.

    With `plugin` (the codes of a device plugin ``-Fault`` element), the other forms that element holds are
    accepted too, see :func:`plugin_code`. Each bad code is dropped with a ``bad-code`` rejection; the good ones
    are kept.
    """
    out: set[str] = set()
    for v in values:
        if isinstance(v, str):
            code = v.strip()
            if _CODE.fullmatch(code):
                out.add(code.upper())
                continue
            if plugin and (normal := plugin_code(code)) is not None:
                out.add(normal)
                continue
        kinds = "a hex code of at most 8 digits or a 9-character public-fault code" if plugin else "an 8-hex-digit code"
        rej.add("bad-code", f"{what}: {str(v)[:40]!r} is not {kinds}")
    return tuple(sorted(out))


def plugin_code(text: object) -> str | None:
    """A code of a device plugin ``-Fault`` element (or a key of its ``fault_time_and_level_map``) in the form the
    level table uses, or None when it is none of these:

    - 1 to 8 hex digits, any case: the event id. The plugin writes the codes of its fault-code configuration as
      configured (8 digits) and any other with Go's ``%x``, without leading zeros (MindCluster
      ``component/ascend-device-plugin/pkg/common/fault_code.go``, ``FormatFaultCodeHex``): ``c1234ab`` is
      ``0C1234AB``;
    - 9 printable ASCII characters but a comma: a public-fault code ClusterD joined in (its checker only requires
      9 bytes: ``component/clusterd/pkg/application/publicfault/checker.go``, ``checkFaultCode``; e.g.
      ``220001001``, ``NPUHB0001``; a comma would split the element's code list), upper case as the level table
      stores them.
    """
    if not isinstance(text, str):
        return None
    code = text.strip()
    if _SHORT_HEX.fullmatch(code):
        return code.upper().rjust(8, "0")
    if _PUBLIC_CODE.fullmatch(code):
        return code.upper()
    return None


def split_list(text: str) -> list[str]:
    """Split a comma list (``Ascend910-0,Ascend910-1``), dropping blanks and surrounding spaces."""
    return [p for p in (s.strip() for s in text.split(",")) if p]


def parse_level(value: object, what: str, rej: Rejections) -> FaultLevel | None:
    """Read a reporter's fault level (``NotHandleFault`` … ``ManuallySeparateNPU``, surrounding blanks ignored).

    Used for the device plugin's ``FaultLevel``/``fault_level`` fields and NodeD's ``FaultLevel`` (MindCluster
    ``component/ascend-device-plugin/pkg/common`` and ``component/noded/pkg/common`` level names). Returns None and
    adds one rejection (``wrong-type``, ``empty-level`` or ``unknown-level``) when `value` is not a known level.
    """
    if not isinstance(value, str):
        rej.add("wrong-type", f"{what}: expected string, got {json_type(value)}")
        return None
    if not value.strip():
        rej.add("empty-level", f"{what} is empty")
        return None
    try:
        return FaultLevel.parse(value.strip())
    except ValueError:
        rej.add("unknown-level", f"{what}: {value[:40]!r}")
        return None
