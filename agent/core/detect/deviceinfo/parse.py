"""Parse one ``DeviceInfoCfg`` value: the JSON envelope, ``UpdateTime`` and ``CheckCode``, then its faults.

Shape (MindCluster device plugin): ``{"DeviceInfo":{"DeviceList":{...},"UpdateTime":<unix s>},"SuperPodID":int,
"ServerIndex":int,"CheckCode":hex}``; the CheckCode is the SHA-256 of the Go JSON of ``DeviceInfo``
(agent.core.detect.checkcode). Returns a :class:`~agent.core.detect.deviceinfo.faults.DeviceSnapshot`; what could not
be read goes to the caller's Rejections. Never raises.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agent.core.detect.checkcode import go_map, verify_check_code
from agent.core.detect.chips import NodeChips, describe_bad_names
from agent.core.detect.common import MAX_VALUE_BYTES, Rejections, json_type, parse_json, unix_time
from agent.core.detect.deviceinfo.faults import DeviceSnapshot, FaultReader, bounded, chip_names, max_faults
from agent.core.detect.deviceinfo.wire import KEY_DEVICE_INFO, resource_prefixes
from agent.core.detect.levels import LevelTable
from agent.core.faults import ObjectRef


def parse_device_info(
    cfg: str | Mapping[str, Any],
    node: str,
    source: ObjectRef,
    table: LevelTable,
    now: datetime,
    rej: Rejections,
    *,
    previous_list: Mapping[str, Any] | None = None,
    chips: NodeChips | None = None,
    bad_names: list[str] | None = None,
    check_code: bool = True,
) -> DeviceSnapshot:
    """Parse a ``DeviceInfoCfg`` value (the JSON text, or an already parsed object of the same shape).

    When the ``DeviceList`` equals `previous_list`, classification is skipped and ``snap.unchanged`` is set
    (the CheckCode and UpdateTime are still read). With `check_code` False there is no CheckCode to verify
    (ClusterD's flat entries: ClusterD verified the per-node hash before aggregating) and none is expected.

    Chip names are checked against the node (agent.core.detect.chips.ChipNames with `chips`, the Node's NPU resource
    and capacity, when known): an entry naming no chip of the node is skipped (a node-wide fault is kept
    without the name). The names refused go to `bad_names` when given (the caller reports them with its own);
    otherwise they make one ``bad-chip-name`` rejection. At most :func:`max_faults` faults are kept (the most
    severe), the rest make one ``too-many-faults`` rejection.

    Returns:
        The snapshot; what could not be read is in `rej` (reasons: ``value-too-large``, ``json-truncated``,
        ``json-invalid``, ``wrong-type``, ``missing-key``, ``bad-check-code``, ``missing-check-code``,
        ``bad-timestamp``, ``unknown-level``, ``empty-level``, ``unknown-fault-type``, ``bad-code``). Never raises.
    """
    snap = DeviceSnapshot(node)
    obj = parse_json(cfg, KEY_DEVICE_INFO, rej) if isinstance(cfg, str) else cfg
    if obj is None:
        return snap
    if not isinstance(obj, Mapping):
        rej.add("wrong-type", f"{KEY_DEVICE_INFO}: expected object, got {json_type(obj)}")
        return snap
    info = obj.get("DeviceInfo")
    if not isinstance(info, dict):
        rej.add(
            "missing-key" if info is None else "wrong-type", f"{KEY_DEVICE_INFO}.DeviceInfo missing or not an object"
        )
        return snap
    dl = info.get("DeviceList")
    null_list = "DeviceList" in info and dl is None  # Go reads null as an empty (nil) map: no chips, healthy
    if not isinstance(dl, dict) and not null_list:
        rej.add("missing-key" if dl is None else "wrong-type", "DeviceInfo.DeviceList missing or not an object")
        dl = None
    ut_raw = info.get("UpdateTime")
    if ut_raw is None:
        rej.add("missing-key", "DeviceInfo.UpdateTime is missing")
    else:
        snap.update_time = unix_time(ut_raw, 1, "DeviceInfo.UpdateTime", now, rej)
    code = obj.get("CheckCode")
    if not check_code:
        pass
    elif not isinstance(code, str) or not code:
        rej.add("missing-check-code", f"{KEY_DEVICE_INFO}.CheckCode missing or not a string")
        snap.check_code_ok = False
    elif not verify_check_code(
        {"DeviceList": go_map(dl) if dl is not None else None, "UpdateTime": 0 if ut_raw is None else ut_raw}, code
    ):
        rej.add("bad-check-code", f"CheckCode {code[:64]} does not match the DeviceInfo content")
        snap.check_code_ok = False
    if null_list:
        dl = {}
    if dl is None:
        return snap
    snap.device_list = dl
    if previous_list is not None and dl == previous_list:
        snap.unchanged = True
        return snap
    names = chip_names(node, resource_prefixes(dl), chips)
    reader = FaultReader(source, node, table, now, rej, names, bad_names, dl)
    reader.device_list(dl, snap.update_time or now, snap.check_code_ok, snap)
    if bad_names is None and reader.bad_names:
        rej.add("bad-chip-name", describe_bad_names(reader.bad_names, names))
    snap.faults = bounded(snap.faults, max_faults(names), rej)
    return snap


_HEAD = '{"DeviceInfo":{"DeviceList":'
_DEVICE_INFO_AT = len('{"DeviceInfo":')
_UPDATE_TIME = ',"UpdateTime":'
_CHECK_CODE = '"CheckCode":"'
_TAIL = len(_CHECK_CODE) + 64 + 2  # "CheckCode":"<64 hex>"}
_UNIX_S = re.compile(r"(?:0|[1-9][0-9]{0,17})(?=\})")


def _go_layout(cfg: str) -> tuple[int, int] | None:
    """Where the ``UpdateTime`` digits of a ``DeviceInfoCfg`` in the device plugin's own layout are, as (start,
    end) offsets into `cfg`, when its ``DeviceInfo`` text is exactly what its ``CheckCode`` hashes.

    The layout (Go's ``json.Marshal`` of the plugin's struct, component/ascend-device-plugin/pkg/kubeclient:
    ``{"DeviceInfo":{"DeviceList":{…},"UpdateTime":<s>},…,"CheckCode":"<hex>"}``) with the ``DeviceInfo`` object's
    text hashing (SHA-256, lower-case hex) to the closing ``CheckCode``: then that text is the Go encoding the
    CheckCode covers, byte for byte. None for anything else (the caller parses the whole value)."""
    n = len(cfg)
    if n < len(_HEAD) + _TAIL or n > MAX_VALUE_BYTES or not cfg.startswith(_HEAD) or not cfg.endswith('"}'):
        return None
    code_at = n - _TAIL
    if not cfg.startswith(_CHECK_CODE, code_at):
        return None
    at = cfg.rfind(_UPDATE_TIME, 0, code_at)
    if at < 0:
        return None
    m = _UNIX_S.match(cfg, at + len(_UPDATE_TIME))
    if m is None:
        return None
    end = m.end()
    if '"DeviceInfo"' in cfg[end:code_at]:  # a second DeviceInfo key would be the one read
        return None
    if hashlib.sha256(cfg[_DEVICE_INFO_AT : end + 1].encode()).hexdigest() != cfg[code_at + len(_CHECK_CODE) : -2]:
        return None
    return m.start(), end


def device_list_text(cfg: str) -> tuple[str, int] | None:
    """``(the DeviceList's JSON text, UpdateTime in Unix s)`` of a ``DeviceInfoCfg`` in the device plugin's own
    layout whose CheckCode matches its text (:func:`_go_layout`: then that text is exactly what the CheckCode
    covers, and the value reads as a full parse would, with a CheckCode that verifies), else None. Pure."""
    layout = _go_layout(cfg)
    if layout is None:
        return None
    return cfg[len(_HEAD) - 1 : layout[0] - len(_UPDATE_TIME)], int(cfg[layout[0] : layout[1]])


def rewritten_update_time(cfg: str, previous: str) -> int | None:
    """The new ``DeviceInfo.UpdateTime`` (Unix s) when `cfg` is `previous` rewritten with only a new
    ``UpdateTime`` and its matching ``CheckCode`` (the device plugin's heartbeat), else None. Pure.

    Both must be in the plugin's own layout with a CheckCode that matches their text (:func:`_go_layout`); the rest
    (``DeviceList``, ``SuperPodID``, ``ServerIndex``, anything else) must be the same characters. Then `cfg` reads
    as `previous` did (same DeviceList, a CheckCode that verifies, as :func:`parse_device_info` would find: the
    DeviceInfo text is Go's encoding of what it parses to, so its hash is the CheckCode Go would compute) with only
    the UpdateTime changed; a value that parses to the same but is written otherwise is not recognised (None), as
    is a CheckCode in upper case. Cost: two substring compares and one SHA-256 of the DeviceInfo text, no JSON
    parse."""
    new = _go_layout(cfg)
    if new is None:
        return None
    old = _go_layout(previous)
    if old is None or new[0] != old[0] or not cfg.startswith(previous[: old[0]]):
        return None
    if cfg[new[1] : len(cfg) - _TAIL] != previous[old[1] : len(previous) - _TAIL]:
        return None
    return int(cfg[new[0] : new[1]])
