"""Parse one ``DeviceInfoCfg`` value: the JSON envelope, ``UpdateTime`` and ``CheckCode``, then its faults.

Shape (MindCluster device plugin): ``{"DeviceInfo":{"DeviceList":{...},"UpdateTime":<unix s>},"SuperPodID":int,
"ServerIndex":int,"CheckCode":hex}``; the CheckCode is the SHA-256 of the Go JSON of ``DeviceInfo``
(agent.core.detect.checkcode). Returns a :class:`~agent.core.detect.deviceinfo.faults.DeviceSnapshot`; what could not
be read goes to the caller's Rejections. Never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agent.core.detect.checkcode import go_map, verify_check_code
from agent.core.detect.chips import NodeChips, describe_bad_names
from agent.core.detect.common import Rejections, json_type, parse_json, unix_time
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
