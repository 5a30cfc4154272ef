"""The device ConfigMap detector: the last view of each device ConfigMap, and what each update changes. Pure.

:class:`DeviceInfoDetector` keeps, by (namespace, name), the content last read and the faults it meant, and turns
an added, modified or deleted ConfigMap into new faults, cleared faults and rejections
(:class:`~agent.core.detect.common.DetectResult`); it holds back the clears of a chip isolated for flapping
(agent.core.detect.flapping) and re-reads on a new level table or a changed Node. The parse is
agent.core.detect.deviceinfo.parse's, the fault construction agent.core.detect.deviceinfo.faults'. Never raises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.chips import ChipNames, NodeChips, describe_bad_names
from agent.core.detect.common import DetectResult, Identity, Rejections, json_type, unix_time
from agent.core.detect.deviceinfo.faults import DeviceSnapshot, FaultReader, bounded, chip_names, max_faults
from agent.core.detect.deviceinfo.parse import device_list_text, parse_device_info, rewritten_update_time
from agent.core.detect.deviceinfo.wire import (
    DEVICE_INFO_PREFIX,
    KEY_DEVICE_INFO,
    KEY_MANUAL,
    KEY_SWITCH,
    node_of,
    resource_prefixes,
)
from agent.core.detect.diff import Seen, View, clear_all, diff_views
from agent.core.detect.flapping import FLAPPING_SUFFIX, FlapTracker
from agent.core.detect.levels import LevelTable
from agent.core.faults import Fault, FaultCleared, ObjectRef

OnMismatch = Literal["use", "ignore"]
NodeLookup = Callable[[str], NodeChips | None]
"""Node name → its NPU resource and capacity, or None when no such Node exists."""


@dataclass(slots=True)
class _State:
    cfg: str | Mapping[str, Any] | None  # a dict for ClusterD entries (kept for set_table)
    manual: str | None
    switch: str | None
    device_list: dict[str, Any] | None
    update_time: datetime | None
    check_code_ok: bool
    dev_view: View
    side_view: View
    rejections: frozenset[tuple[str, str]]
    resource_version: str = ""


_NO_TEXT = (None, "")
"""``ManuallySeparateNPU`` and the switch info when absent or empty: they read as no fault and no rejection (what
FaultReader.manual and .switch return for them), so the node's chip-name rule is not built for them."""

_NONE_SEEN: frozenset[tuple[str, str]] = frozenset()
"""The rejections remembered for a ConfigMap that had none: one object shared by every such ConfigMap."""


class DeviceInfoDetector:
    """Keeps the last view of every device ConfigMap and turns updates into new and cleared faults.

    Args:
        table: the level table (swap it with :meth:`set_table` when the fault config changes).
        on_mismatch: ``"use"`` the data of a ConfigMap whose CheckCode does not match (faults carry
            ``check_code_ok=False``), or ``"ignore"`` such an update (keep the previous view). Both reject it
            once as ``bad-check-code`` (settings: detect.check_code_mismatch).
        flapping: escalates chips that fault repeatedly; None disables it.
        name_prefix: ConfigMap name prefix before the node name.
        fast_path: skip unchanged content cheaply (off only to measure the benchmark's baseline).
        nodes: looks up the ConfigMap's Node (its NPU resource and capacity); None: no Node is consulted and chip
            names are only checked for their form. A ConfigMap whose Node does not exist is rejected as
            ``unknown-node`` and yields no faults (those it reported before are cleared); call :meth:`recheck`
            when the Node appears, goes or changes its capacity.
        check_code: the content carries a CheckCode to verify (False for ClusterD's flat entries).

    Fast paths: an update whose ``DeviceInfoCfg``, ``ManuallySeparateNPU`` and ``SwitchInfoCfg`` strings are
    unchanged costs three string compares; a rewrite with a new ``UpdateTime`` but the same ``DeviceList`` costs
    one JSON parse and the CheckCode, not the classification.
    """

    def __init__(
        self,
        table: LevelTable,
        *,
        on_mismatch: OnMismatch = "use",
        flapping: FlapTracker | None = None,
        name_prefix: str = DEVICE_INFO_PREFIX,
        fast_path: bool = True,
        nodes: NodeLookup | None = None,
        check_code: bool = True,
    ):
        self.nodes = nodes
        self.table = table
        self.fast_path = fast_path
        self.check_code = check_code
        self.on_mismatch = on_mismatch
        self.flapping = flapping
        self.name_prefix = name_prefix
        self._state: dict[tuple[str, str], _State] = {}
        self._bad_names: set[tuple[str, str]] = set()
        # clears of an isolated (flapping) chip's faults, held until the chip is released (see tick)
        self._held: dict[Any, FaultCleared] = {}
        # ConfigMaps whose views hold a fault with a code under a FaultDuration rule (what tick looks at)
        self._timed: set[tuple[str, str]] = set()
        # (DeviceList JSON text, the Node's chips) -> that DeviceList parsed, for lists read before with no fault
        # and nothing rejected: one dict shared by every ConfigMap that says the same (most nodes: all healthy)
        self._healthy: dict[tuple[str, NodeChips | None], dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._state)

    def update(self, cm: ConfigMapRecord, now: datetime) -> DetectResult:
        """Read a new version of a device ConfigMap (added or modified); returns what changed. Never raises.

        Rejections besides :func:`parse_device_info`'s: ``unexpected-name`` (not ``mindx-dl-deviceinfo-<node>``:
        the object is skipped), ``missing-key`` (no ``DeviceInfoCfg``), ``unknown-node`` (no such Node: no
        faults), and one ``bad-chip-name`` for every name of the update that is not a chip of the node (the
        ``-Fault`` elements, the lists and ``ManuallySeparateNPU`` together). Each new write reports its
        rejections, even when they read as the previous write's did; a re-read of content already seen
        (:meth:`set_table`, :meth:`recheck`, ClusterD's embedded objects) does not repeat them.
        """
        return self.update_data(cm.namespace, cm.name, cm.data, now, uid=cm.uid, resource_version=cm.resource_version)

    def update_data(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, Any],
        now: datetime,
        *,
        uid: str = "",
        source: ObjectRef | None = None,
        replay: bool = False,
        resource_version: str = "",
    ) -> DetectResult:
        """As :meth:`update`, from the ConfigMap's `data` dict (values normally str; ClusterD may embed objects).
        `replay`: the content is read again, not newly written (its known rejections are not repeated), as is
        a write whose `resource_version` is the previous one's."""
        out = DetectResult()
        key = (namespace, name)
        src = source or ObjectRef("ConfigMap", namespace, name, uid)
        cfg = data.get(KEY_DEVICE_INFO)
        manual = data.get(KEY_MANUAL)
        switch = data.get(KEY_SWITCH)
        prev = self._state.get(key)
        if (
            self.fast_path
            and prev is not None
            and isinstance(cfg, str)
            and cfg == prev.cfg
            and manual == prev.manual
            and switch == prev.switch
        ):
            return out
        if self.fast_path and prev is not None and self._heartbeat(key, prev, name, cfg, manual, switch, now, src,
                                                                    resource_version):  # fmt: skip
            return out
        rej = Rejections(src)
        node = node_of(name, self.name_prefix)
        if node is None:
            if key not in self._bad_names:
                self._bad_names.add(key)
                rej.add("unexpected-name", f"{name[:80]!r} is not {self.name_prefix}<node>")
            out.rejections = rej.items
            return out
        replay = (
            replay
            or isinstance(cfg, dict)
            or (bool(resource_version) and prev is not None and prev.resource_version == resource_version)
        )
        chips: NodeChips | None = None
        if self.nodes is not None:
            chips = self.nodes(node)
            if chips is None:
                return self._unknown_node(key, resource_version, src, node, data, prev, now, rej, out, replay)
        bad_names: list[str] = []
        base_view: View = prev.dev_view if prev else {}
        dev_view = base_view
        device_list = prev.device_list if prev else None
        update_time = prev.update_time if prev else None
        check_ok = prev.check_code_ok if prev else True
        fresh_all: list[tuple[View, Identity]] = []
        if cfg is None:
            rej.add("missing-key", f"{KEY_DEVICE_INFO} is missing")
        elif not isinstance(cfg, (str, dict)):
            rej.add("wrong-type", f"{KEY_DEVICE_INFO}: expected string, got {json_type(cfg)}")
        elif prev is not None and cfg == prev.cfg:
            pass
        else:
            previous_list = prev.device_list if self.fast_path and prev is not None else None
            known = self._known_healthy(cfg, chips, now, src, previous_list) if self.fast_path else None
            snap = known or parse_device_info(
                cfg,
                node,
                src,
                self.table,
                now,
                rej,
                previous_list=previous_list,
                chips=chips,
                bad_names=bad_names,
                check_code=self.check_code,
            )
            if known is None and self.fast_path:
                self._note_healthy(cfg, chips, snap, rej, bad_names)
            if snap.unchanged and prev is not None and snap.check_code_ok != prev.check_code_ok:
                rej = Rejections(src)  # the CheckCode verdict flipped: classify again so faults carry it
                bad_names.clear()
                snap = parse_device_info(
                    cfg, node, src, self.table, now, rej, chips=chips, bad_names=bad_names, check_code=self.check_code
                )
            if not snap.check_code_ok and self.on_mismatch == "ignore":
                pass
            elif snap.unchanged:
                update_time, device_list = snap.update_time, snap.device_list
            elif snap.device_list is not None or prev is None:
                new = snap.faults
                if snap.broken_prefixes and prev is not None:
                    new = self._carry_over(new, prev.dev_view)
                dev_view, fresh = diff_views(base_view, new, now, src, out)
                fresh_all.extend((dev_view, i) for i in fresh)
                update_time, device_list, check_ok = snap.update_time, snap.device_list, snap.check_code_ok
        side_base: View = prev.side_view if prev else {}
        side_view = side_base
        names: ChipNames | None = None  # the node's chip-name rule, built when something reads it
        if prev is None or manual != prev.manual or switch != prev.switch:
            side: dict[Identity, Fault] = {}
            if manual not in _NO_TEXT or switch not in _NO_TEXT:  # both absent or "": no fault, nothing rejected
                names = chip_names(node, resource_prefixes(device_list or {}), chips)
                reader = FaultReader(src, node, self.table, now, rej, names, bad_names, device_list)
                t = update_time or now
                if isinstance(manual, str):
                    side.update(reader.manual(manual, t))
                elif manual is not None:
                    rej.add("wrong-type", f"{KEY_MANUAL}: expected string, got {json_type(manual)}")
                if isinstance(switch, str):
                    side.update(reader.switch(switch, t))
                elif switch is not None:
                    rej.add("wrong-type", f"{KEY_SWITCH}: expected string, got {json_type(switch)}")
                side = bounded(side, max_faults(names), rej)
            side_view, fresh = diff_views(side_base, side, now, src, out)
            fresh_all.extend((side_view, i) for i in fresh)
        for view, ident in fresh_all:
            seen = view[ident]
            fault = self.flapping.observe(seen.fault) if self.flapping else seen.fault
            if fault is not seen.fault:
                view[ident] = Seen(seen.level, fault)
            self._held.pop(fault.key, None)  # the chip faults again: the held clear is superseded
            out.faults.append(fault)
        self._hold_isolated(out, now)
        if bad_names:
            if names is None:
                names = chip_names(node, resource_prefixes(device_list or {}), chips)
            rej.add("bad-chip-name", describe_bad_names(bad_names, names))
        seen_rej = self._report(rej, prev, out, replay)
        self._state[key] = _State(
            cfg if isinstance(cfg, (str, dict)) else None,
            manual if isinstance(manual, str) else None,
            switch if isinstance(switch, str) else None,
            device_list,
            update_time,
            check_ok,
            dev_view,
            side_view,
            seen_rej,
            resource_version,
        )
        self._note_timed(key, dev_view, side_view)
        return out

    def _known_healthy(
        self,
        cfg: object,
        chips: NodeChips | None,
        now: datetime,
        src: ObjectRef,
        previous_list: dict[str, Any] | None,
    ) -> DeviceSnapshot | None:
        """The read of `cfg` when its DeviceList was read before, for the same chips, with no fault and nothing
        rejected (:meth:`_note_healthy`), and its CheckCode matches its text (device_list_text): what
        parse_device_info would return, without parsing or classifying again. None otherwise."""
        if not isinstance(cfg, str) or not self.check_code or not self._healthy:
            return None
        read = device_list_text(cfg)
        if read is None:
            return None
        shared = self._healthy.get((read[0], chips))
        if shared is None:
            return None
        scratch = Rejections(src)
        update_time = unix_time(read[1], 1, "DeviceInfo.UpdateTime", now, scratch)
        if update_time is None:
            return None
        snap = DeviceSnapshot(node_of(src.name, self.name_prefix) or "", update_time, True, shared)
        snap.unchanged = previous_list is not None and (previous_list is shared or previous_list == shared)
        return snap

    def _note_healthy(
        self, cfg: object, chips: NodeChips | None, snap: DeviceSnapshot, rej: Rejections, bad_names: list[str]
    ) -> None:
        """Remember a DeviceList that read with no fault and nothing rejected (a full read, not one skipped as
        unchanged), by its text (bounded: forgotten all at once past 4,096 different lists)."""
        if (
            not isinstance(cfg, str)
            or not self.check_code
            or snap.unchanged
            or snap.faults
            or snap.broken_prefixes
            or not snap.check_code_ok
            or snap.device_list is None
            or rej.items
            or bad_names
        ):
            return
        read = device_list_text(cfg)
        if read is None:
            return
        if len(self._healthy) >= 4096:
            self._healthy.clear()
        self._healthy.setdefault((read[0], chips), snap.device_list)
        snap.device_list = self._healthy[(read[0], chips)]

    def _heartbeat(
        self,
        key: tuple[str, str],
        prev: _State,
        name: str,
        cfg: object,
        manual: object,
        switch: object,
        now: datetime,
        src: ObjectRef,
        resource_version: str,
    ) -> bool:
        """Whether this write is the device plugin's heartbeat over content already read cleanly (only
        ``UpdateTime`` and its ``CheckCode`` new: :func:`~agent.core.detect.deviceinfo.parse.rewritten_update_time`),
        taken by keeping the previous read with the new UpdateTime: nothing else it reads changed, so a full read
        would find the same faults (none new, none cleared) and no rejection. Not taken (False: the caller reads
        the write in full) after a read with rejections (each write reports its own again), a CheckCode that did not
        match, a Node that no longer exists, or an UpdateTime out of range."""
        if (
            not isinstance(cfg, str)
            or not isinstance(prev.cfg, str)
            or prev.rejections
            or not prev.check_code_ok
            or prev.device_list is None
            or manual != prev.manual
            or switch != prev.switch
            or not self.check_code
        ):
            return False
        seconds = rewritten_update_time(cfg, prev.cfg)
        if seconds is None:
            return False
        scratch = Rejections(src)
        update_time = unix_time(seconds, 1, "DeviceInfo.UpdateTime", now, scratch)
        if update_time is None:
            return False
        node = node_of(name, self.name_prefix)
        if node is None or (self.nodes is not None and self.nodes(node) is None):
            return False
        prev.cfg, prev.update_time, prev.resource_version = cfg, update_time, resource_version
        return True

    def _note_timed(self, key: tuple[str, str], *views: View) -> None:
        rules = self.flapping.rules.duration if self.flapping is not None else None
        if rules and any(c in rules for view in views for seen in view.values() for c in seen.fault.codes):
            self._timed.add(key)
        else:
            self._timed.discard(key)

    def delete(self, namespace: str, name: str, now: datetime, *, uid: str = "") -> DetectResult:
        """The ConfigMap was deleted: every fault it reported is cleared."""
        out = DetectResult()
        prev = self._state.pop((namespace, name), None)
        self._timed.discard((namespace, name))
        self._bad_names.discard((namespace, name))  # a bad name that comes back is reported again
        if prev is not None:
            src = ObjectRef("ConfigMap", namespace, name, uid)
            clear_all(prev.dev_view, now, src, out)
            clear_all(prev.side_view, now, src, out)
            self._hold_isolated(out, now)
        return out

    def _hold_isolated(self, out: DetectResult, now: datetime) -> None:
        """Tell the flap tracker what cleared, and keep back the clears of an isolated chip's faults: the chip
        stays out (its fault active) until :meth:`tick` finds it released."""
        if self.flapping is None or not out.cleared:
            return
        kept: list[FaultCleared] = []
        for c in out.cleared:
            f = c.fault
            self.flapping.cleared(f, now)
            if f.reason.endswith(FLAPPING_SUFFIX) and self.flapping.is_isolated(f.node, f.chips):
                if not any(n.key == f.key for n in out.faults):  # not re-raised in the same update
                    self._held[f.key] = c
                continue
            kept.append(c)
        out.cleared = kept

    def tick(self, now: datetime) -> DetectResult:
        """Time-based flapping (agent.core.detect.flapping): the held clears of chips released at `now`, and faults
        still active past a ``FaultDuration`` rule's timeout, cleared and raised again at the rule's level (the
        result's `cleared` come before its `faults` of the same key: emit them in that order)."""
        out = DetectResult()
        if self.flapping is None:
            return out
        released = set(self.flapping.released(now))
        for key, c in list(self._held.items()):
            if not self.flapping.is_isolated(c.fault.node, c.fault.chips) or released.intersection(
                (c.fault.node, chip) for chip in c.fault.chips
            ):
                del self._held[key]
                out.cleared.append(FaultCleared(c.fault, now, c.source))
        if not self.flapping.rules.duration:
            return out
        for key in list(self._timed):
            st = self._state.get(key)
            if st is None:
                self._timed.discard(key)
                continue
            for view in (st.dev_view, st.side_view):
                for ident, seen in list(view.items()):
                    level = self.flapping.duration_level(seen.fault, now)
                    if level is None or level <= seen.fault.level:
                        continue
                    new = replace(seen.fault, level=level, observed_at=now)
                    view[ident] = Seen(seen.level, new)
                    out.cleared.append(FaultCleared(seen.fault, now, seen.fault.source))
                    out.faults.append(new)
        return out

    def set_table(self, table: LevelTable, now: datetime) -> DetectResult:
        """Use a new level table (fault config reloaded) and re-classify every known ConfigMap with it.

        Faults whose level changed are cleared and emitted again at the new level.
        """
        self.table = table
        self._healthy.clear()
        if self.flapping is not None:
            self.flapping.set_rules(table.customization)
        out = DetectResult()
        for (ns, name), st in list(self._state.items()):
            data: dict[str, Any] = {}
            if st.cfg is not None:
                data[KEY_DEVICE_INFO] = st.cfg
            if st.manual is not None:
                data[KEY_MANUAL] = st.manual
            if st.switch is not None:
                data[KEY_SWITCH] = st.switch
            self._state[(ns, name)] = _State(
                None, None, None, None, st.update_time, st.check_code_ok, st.dev_view, st.side_view, st.rejections
            )
            src = next((s.fault.source for s in (*st.dev_view.values(), *st.side_view.values())), None)
            out.extend(self.update_data(ns, name, data, now, source=src, replay=True))
        return out

    def recheck(self, cm: ConfigMapRecord, now: datetime) -> DetectResult:
        """Read `cm` again because its Node appeared, went, or changed its NPU capacity: its faults follow what
        the chip names mean for the node now (a Node that appeared makes them count, one that went clears them).
        Rejections already reported for the same content are not repeated."""
        self.forget_content(cm.namespace, cm.name)
        return self.update_data(cm.namespace, cm.name, cm.data, now, uid=cm.uid, replay=True)

    def forget_content(self, namespace: str, name: str) -> None:
        """Forget the content last read for ConfigMap (or ClusterD entry) `name`, keeping its faults and the
        rejections it reported, so that the next read of the same content classifies it again (against a Node that
        changed: :meth:`recheck`, agent.core.detect.clusterd.ClusterDDetector.recheck)."""
        key = (namespace, name)
        st = self._state.get(key)
        if st is not None:  # the fast path and the unchanged-content check compare these
            self._state[key] = _State(
                None, None, None, None, st.update_time, st.check_code_ok, st.dev_view, st.side_view, st.rejections
            )

    @staticmethod
    def _report(rej: Rejections, prev: _State | None, out: DetectResult, replay: bool) -> frozenset[tuple[str, str]]:
        """Put this update's rejections on `out` (a replay drops those the previous read already reported);
        returns what to remember as reported."""
        seen = frozenset((r.reason, r.detail) for r in rej.items) if rej.items else _NONE_SEEN  # one for all
        old = prev.rejections if prev else _NONE_SEEN
        out.rejections = [r for r in rej.items if not replay or (r.reason, r.detail) not in old]
        return seen

    def _unknown_node(
        self,
        key: tuple[str, str],
        resource_version: str,
        src: ObjectRef,
        node: str,
        data: Mapping[str, Any],
        prev: _State | None,
        now: datetime,
        rej: Rejections,
        out: DetectResult,
        replay: bool,
    ) -> DetectResult:
        """The ConfigMap names a node that does not exist: reported, no faults (earlier ones are cleared)."""
        rej.add("unknown-node", f"node {node[:80]!r} does not exist: its device ConfigMap is not acted on")
        if prev is not None:
            clear_all(prev.dev_view, now, src, out)
            clear_all(prev.side_view, now, src, out)
        seen = self._report(rej, prev, out, replay)
        cfg, manual, switch = data.get(KEY_DEVICE_INFO), data.get(KEY_MANUAL), data.get(KEY_SWITCH)
        self._state[key] = _State(
            cfg if isinstance(cfg, str) else None,
            manual if isinstance(manual, str) else None,
            switch if isinstance(switch, str) else None,
            None,
            None,
            True,
            {},
            {},
            seen,
            resource_version,
        )
        return out

    @staticmethod
    def _carry_over(new: dict[Identity, Fault], old: View) -> dict[Identity, Fault]:
        """A broken ``-Fault`` string: keep the previously read faults of chips the lists still name."""
        merged = dict(new)
        for ident, fault in list(new.items()):
            if ident[0] != "list":
                continue
            kept = [
                (i, s)
                for i, s in old.items()
                if i[0] == "fault" and s.fault.kind == fault.kind and s.fault.chips == fault.chips
            ]
            if kept:
                del merged[ident]
                for i, s in kept:
                    merged[i] = s.fault if s.fault.level == s.level else replace(s.fault, level=s.level)
        return merged
