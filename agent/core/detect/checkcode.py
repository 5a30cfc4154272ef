"""CheckCode of MindCluster ConfigMaps: SHA-256 of Go's ``json.Marshal`` output, reproduced byte for byte.

The device plugin (``DeviceInfoCfg``) and NodeD (``NodeInfo``) store next to their payload a ``CheckCode``: the
lower-case hex SHA-256 of ``json.Marshal(payload)`` in Go. To verify it we re-encode the parsed payload the way Go's
``encoding/json`` does (see the Go documentation of ``json.Marshal``):

- struct fields in declaration order (the caller builds the dict in that order), map keys sorted by bytes;
- no whitespace;
- ``<``, ``>``, ``&`` escaped as ``\\u003c``, ``\\u003e``, ``\\u0026`` (HTML-safe escaping is on by default),
  U+2028 and U+2029 as ``\\u2028`` / ``\\u2029``;
- other control characters as ``\\n``, ``\\r``, ``\\t`` or ``\\u00XX``; since Go 1.22 ``\\b`` and ``\\f`` use the
  short forms too, older Go wrote ``\\u0008`` / ``\\u000c`` (both spellings are accepted when verifying);
- invalid UTF-8 (here: lone surrogates from a ``\\udXXX`` escape) becomes U+FFFD.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import orjson

_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=False, allow_nan=False)
_SURROGATE = re.compile("[\ud800-\udfff]")
_HTML_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
_NEEDS_POST = re.compile("[<>&\u2028\u2029\ud800-\udfff]")
# the same in UTF-8 bytes (no surrogates there), each looked for with a plain search (faster than a regex)
_NEEDS_POST_BYTES = (b"<", b">", b"&", "\u2028".encode(), "\u2029".encode())
# A \b or \f escape: an odd run of backslashes before b/f (an even run is escaped backslashes).
_OLD_BF = re.compile(r"(?<!\\)((?:\\\\)*)\\([bf])")


def _old_bf(m: re.Match[str]) -> str:
    return m.group(1) + ("\\u0008" if m.group(2) == "b" else "\\u000c")


def go_map(value: dict[str, Any]) -> dict[str, Any]:
    """A Go ``map[string]…`` as Go encodes it: keys sorted (code-point order equals Go's UTF-8 byte order)."""
    return {k: value[k] for k in sorted(value)}


def go_marshal(struct: dict[str, Any], *, old_go: bool = False) -> bytes:
    """Encode `struct` like Go's ``json.Marshal``.

    Args:
        struct: a dict in the order Go writes it: struct fields in declaration order, Go maps already sorted
            with :func:`go_map`; lists are slices. Values: str, int, bool, None, nested dicts and lists.
        old_go: write ``\\b`` / ``\\f`` as ``\\u0008`` / ``\\u000c`` as Go before 1.22 did.

    Returns:
        The UTF-8 bytes Go would produce.

    Raises:
        ValueError: a float NaN/Infinity (Go refuses them too).
        TypeError: a value of a type Go's encoder would not see here (e.g. a set).
    """
    text = _JSON.encode(struct)
    if _NEEDS_POST.search(text):
        text = _SURROGATE.sub("\ufffd", text)
        for raw, esc in _HTML_ESCAPES:
            text = text.replace(raw, esc)
    if old_go and ("\\b" in text or "\\f" in text):
        text = _OLD_BF.sub(_old_bf, text)
    return text.encode("utf-8")


_PLAIN = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS


def go_marshal_plain(struct: dict[str, Any]) -> bytes:
    """:func:`go_marshal` (modern Go spelling), faster, for a `struct` whose values are only str, int, bool,
    None, dicts and lists (no floats: orjson writes them differently, and NaN as ``null``; no enums, which orjson
    encodes by value). Same bytes: orjson escapes exactly the characters Python's encoder does (``"``, ``\\``,
    controls below U+0020, the short forms for ``\b \f \n \r \t``); Go's extra escapes are applied after as
    in :func:`go_marshal`. A value orjson refuses (a lone surrogate, an int beyond 64 bits, a subclass, a type
    neither encodes) goes through :func:`go_marshal`.

    Raises:
        ValueError, TypeError: as :func:`go_marshal`.
    """
    try:
        raw = orjson.dumps(struct, option=_PLAIN)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return go_marshal(struct)
    if not any(needle in raw for needle in _NEEDS_POST_BYTES):
        return raw
    text = raw.decode("utf-8")
    for plain, esc in _HTML_ESCAPES:
        text = text.replace(plain, esc)
    return text.encode("utf-8")


def _plain(value: object) -> bool:
    """Whether `value` holds only what :func:`go_marshal_plain` encodes as Go does: str, int, bool, None, and
    dicts and lists of them (no float)."""
    if isinstance(value, dict):
        return all(_plain(v) for v in value.values())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or type(value) in (str, int, bool)


def check_code(struct: dict[str, Any]) -> str:
    """Lower-case hex SHA-256 of :func:`go_marshal` of `struct` (modern Go spelling).

    Raises:
        ValueError, TypeError: as :func:`go_marshal`.
    """
    return hashlib.sha256(go_marshal(struct)).hexdigest()


def verify_check_code(struct: dict[str, Any], expected: str) -> bool:
    """True when `expected` (hex, any case) is the CheckCode of `struct` under either Go spelling of ``\\b``/``\\f``.

    Never raises: a payload Go could not have marshalled does not verify.
    """
    want = expected.strip().lower()
    try:
        encoded = go_marshal_plain(struct) if _plain(struct) else go_marshal(struct)
        if hashlib.sha256(encoded).hexdigest() == want:
            return True
        if b"\\b" in encoded or b"\\f" in encoded:
            return hashlib.sha256(go_marshal(struct, old_go=True)).hexdigest() == want
    except (ValueError, TypeError):
        return False
    return False
