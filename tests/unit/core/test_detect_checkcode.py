"""CheckCode (Go json.Marshal + SHA-256) against the real hashes in the fixtures, and the level table copies."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from agent.core.detect.checkcode import check_code, go_map, go_marshal, go_marshal_plain, verify_check_code
from agent.core.detect.levels import LevelTableError, load_shipped_table
from agent.core.faults import FaultLevel

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"
ROOT = Path(__file__).parent.parent.parent.parent


def _device_struct(name: str) -> tuple[dict[str, object], str]:
    cfg = json.loads(json.loads((FIXTURES / name).read_text())["data"]["DeviceInfoCfg"])
    info = cfg["DeviceInfo"]
    return {"DeviceList": go_map(info["DeviceList"]), "UpdateTime": info["UpdateTime"]}, cfg["CheckCode"]


def _node_struct(name: str) -> tuple[dict[str, object], str]:
    doc = json.loads(json.loads((FIXTURES / name).read_text())["data"]["NodeInfo"])
    inner = doc["NodeInfo"]
    devs = [{k: d[k] for k in ("DeviceType", "DeviceId", "FaultCode", "FaultLevel")} for d in inner["FaultDevList"]]
    return {"FaultDevList": devs, "NodeStatus": inner["NodeStatus"]}, doc["CheckCode"]


@pytest.mark.parametrize(
    ("fixture", "loader", "ok"),
    [
        pytest.param("deviceinfo-healthy.json", _device_struct, True, id="device-healthy"),
        pytest.param("deviceinfo-chip-restartbusiness.json", _device_struct, True, id="device-restartbusiness"),
        pytest.param("deviceinfo-chip-separate-multi-code.json", _device_struct, True, id="device-multi-code"),
        pytest.param("deviceinfo-network-preseparate.json", _device_struct, True, id="device-network"),
        pytest.param("deviceinfo-npu-prefix-restartnpu.json", _device_struct, True, id="device-npu-prefix"),
        pytest.param("deviceinfo-bad-checkcode.json", _device_struct, False, id="device-bad-checkcode"),
        pytest.param("nodeinfo-unhealthy-cpu.json", _node_struct, True, id="noded-cpu"),
        pytest.param("nodeinfo-preseparate-memory.json", _node_struct, True, id="noded-memory"),
    ],
)
def test_fixture_check_codes(fixture: str, loader, ok: bool) -> None:  # type: ignore[no-untyped-def]
    struct, expected = loader(fixture)
    assert verify_check_code(struct, expected) is ok
    assert (check_code(struct) == expected) is ok


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        pytest.param("a<b>&c", '"a\\u003cb\\u003e\\u0026c"', id="html-escaped"),
        pytest.param("x\u2028y\u2029", '"x\\u2028y\\u2029"', id="line-separators"),
        pytest.param('tab\tnl\nq"bs\\', '"tab\\tnl\\nq\\"bs\\\\"', id="short-escapes"),
        pytest.param("\x01\x1f", '"\\u0001\\u001f"', id="control-chars"),
        pytest.param("\x08\x0c", '"\\b\\f"', id="go122-b-f"),
        pytest.param("é中", '"é中"', id="utf8-raw"),
        pytest.param("\ud800", '"\ufffd"', id="lone-surrogate-replaced"),
    ],
)
def test_go_marshal_string_escapes(value: str, encoded: str) -> None:
    assert go_marshal({"K": value}) == ('{"K":' + encoded + "}").encode()
    assert go_marshal_plain({"K": value}) == go_marshal({"K": value})  # the fast path: the same bytes


@pytest.mark.parametrize(
    "struct",
    [
        pytest.param({"k" + chr(c): [chr(c) * 2, f"a{chr(c)}b"]}, id=f"U+{c:04X}")
        for c in [*range(0x80), 0xA0, 0x2028, 0x2029, 0xD800, 0xDFFF, 0xFEFF, 0xFFFF, 0x10FFFF]
    ]
    + [
        pytest.param({"n": [0, -1, 2**63 - 1, -(2**63), 2**64, True, False, None]}, id="ints-beyond-64-bits"),
        pytest.param({"Z": go_map({"b": [{"<": "&"}], "a": {}}), "A": []}, id="nested"),
    ],
)
def test_go_marshal_plain_gives_go_marshals_bytes(struct: dict[str, object]) -> None:
    """Every character below U+0080 and the special ones, in keys and values; ints orjson refuses (fallback)."""
    assert go_marshal_plain(struct) == go_marshal(struct)


def test_go_marshal_plain_refuses_what_go_marshal_refuses() -> None:
    with pytest.raises(TypeError):
        go_marshal_plain({"s": {1, 2}})


def test_go_marshal_keeps_struct_order_and_sorts_maps() -> None:
    struct = {"Z": go_map({"b": "1", "a": "2", "B": "3"}), "A": 5}
    assert go_marshal(struct) == b'{"Z":{"B":"3","a":"2","b":"1"},"A":5}'


def test_old_go_b_f_spelling_also_verifies() -> None:
    struct = {"DeviceList": {"k": "a\x08b"}, "UpdateTime": 1}
    old = hashlib.sha256(b'{"DeviceList":{"k":"a\\u0008b"},"UpdateTime":1}').hexdigest()
    assert verify_check_code(struct, old)
    assert verify_check_code(struct, check_code(struct))
    assert not verify_check_code(struct, "0" * 64)


def test_verify_never_raises_on_unencodable() -> None:
    assert not verify_check_code({"K": float("nan")}, "0" * 64)
    assert not verify_check_code({"K": {1, 2}}, "0" * 64)


def test_shipped_table_copies_identical() -> None:
    packaged = (ROOT / "agent" / "core" / "detect" / "data" / "fault_levels.yaml").read_bytes()
    documented = (ROOT / "config" / "fault_levels.yaml").read_bytes()
    assert packaged == documented


@pytest.mark.parametrize(
    ("code", "level"),
    [
        pytest.param("80E01801", FaultLevel.RESTART_BUSINESS, id="restart-business"),
        pytest.param("80E3A201", FaultLevel.SEPARATE, id="separate"),
        pytest.param("80E18005", FaultLevel.RESTART_NPU, id="restart-npu"),
        pytest.param("80E21007", FaultLevel.NOT_HANDLE, id="not-handle"),
        pytest.param("8C2FA001", FaultLevel.SUB_HEALTH, id="sub-health"),
    ],
)
def test_shipped_table_levels(code: str, level: FaultLevel) -> None:
    assert load_shipped_table().shipped[code] is level


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a: [", id="bad-yaml"),
        pytest.param("- 1", id="not-mapping"),
        pytest.param("SeparateNPUCodes: [XYZ]", id="bad-code"),
        pytest.param("unknown: {chip: Bogus}", id="bad-unknown-level"),
    ],
)
def test_bad_shipped_table_raises(text: str) -> None:
    with pytest.raises(LevelTableError):
        load_shipped_table(text)


def test_most_severe_wins_within_table() -> None:
    table = load_shipped_table("RestartBusinessCodes: [A2301001]\nSeparateNPUCodes: [a2301001]\n")
    assert table.shipped == {"A2301001": FaultLevel.SEPARATE}
