"""Per-chip flapping, as MindCluster's device plugin does it: per-code frequency and duration rules. Pure.

Rules (agent.core.detect.customization, MindCluster's ``faultCustomization.json``; the device plugin applies them in
component/ascend-device-plugin/pkg/common/fault_code.go ``GetFaultTypeFromFaultFrequency``,
``handleFrequencyFault`` and ``GetFaultTypeFromFaultDuration``):

- **frequency**: every new fault of a chip counts once for each of its codes that has a ``FaultFrequency`` rule,
  at its signal time (the device plugin's fault time). Occurrences older than ``TimeWindow`` seconds before now
  are forgotten; when ``Times`` remain, the fault gets the rule's ``FaultHandling`` level. ManuallySeparateNPU
  **isolates that chip** (never the node): every later fault of the chip is ManuallySeparateNPU too, and the chip
  stays isolated until it has been healthy for the rule's ``ReleaseTimeWindow`` (or, without one, for
  ``isolation_release_s``: see below).
- **duration**: a fault with a code that has a ``FaultDuration`` rule and is still active ``FaultTimeout``
  seconds after its signal time gets the rule's level (:meth:`FlapTracker.duration_level`, called from the
  detector's tick); the same code on the chip again within ``RecoverTimeout`` seconds of that fault clearing
  gets it at once.
- the agent's own **catch-all** (not in MindCluster, off with threshold 0): `threshold` faults of one chip at
  RestartRequest or above, whatever their codes, within `window` isolate the chip too.

A fault that isolates its chip, and every fault of an isolated chip, carries the reason suffix ``+Flapping``
(agent.policy.is_flapping). Where the agent differs from MindCluster on purpose: MindCluster keeps a chip isolated
by a rule without ``ReleaseTimeWindow`` until an operator removes it from the device ConfigMap's
``ManuallySeparateNPU`` key; the agent writes no device-plugin ConfigMap, so its own isolation ends after
``isolation_release_s`` of health (the plugin's own ``ManuallySeparateNPU`` key still keeps the chip out as long
as MindCluster does, and the agent reads it).

Counts are kept per (node, chip, code) in memory; the clock is the faults' own ``observed_at`` and the `now`
passed in (no clock reads).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from agent.core.detect.customization import FaultCustomization
from agent.core.faults import Fault, FaultKind, FaultLevel

QUARANTINE_LEVEL = FaultLevel.MANUALLY_SEPARATE
"""The level of an isolated chip's faults (MindCluster's ``FaultHandling`` for flapping chips)."""

FLAPPING_SUFFIX = "+Flapping"

ChipKey = tuple[str, str]
"""(node, chip name)."""

_KINDS = (FaultKind.CHIP, FaultKind.NETWORK)


def counts_as_flap(level: FaultLevel) -> bool:
    """True for the levels a chip fault counts towards the catch-all rule with: RestartRequest and above
    (PreSeparateNPU included). SubHealthFault and NotHandleFault never count."""
    return level >= FaultLevel.RESTART_REQUEST


@dataclass(slots=True)
class Isolation:
    """One isolated chip.

    Attributes:
        since: when it was isolated (the tripping fault's observed_at).
        codes: the codes of the tripping fault.
        release: how long the chip must be healthy before the isolation ends.
        healthy_since: when its last isolated fault cleared; None while one is active.
    """

    since: datetime
    codes: tuple[str, ...]
    release: timedelta
    healthy_since: datetime | None = None


class FlapTracker:
    """Counts new chip faults per (node, chip, code) and applies the frequency and duration rules.

    Args:
        threshold: the catch-all rule's count (settings detect.flap_threshold); 0 turns it off.
        window: the catch-all rule's window (detect.flap_window_s).
        rules: the per-code rules in force (None: none); swap them with :meth:`set_rules`.
        release: how long a chip isolated by a rule without ReleaseTimeWindow (or by the catch-all) must be
            healthy before it is released (detect.isolation_release_s).
    """

    def __init__(
        self,
        threshold: int,
        window: timedelta,
        rules: FaultCustomization | None = None,
        *,
        release: timedelta = timedelta(hours=24),
    ):
        if threshold < 0 or threshold == 1:
            raise ValueError("flap threshold must be 0 (off) or >= 2")
        self.threshold = threshold
        self.window = window
        self.rules = rules or FaultCustomization()
        self.release = release
        self._seen: dict[ChipKey, deque[datetime]] = {}
        self._by_code: dict[tuple[str, str, str], deque[datetime]] = {}
        self._recovered: dict[tuple[str, str, str], datetime] = {}  # duration-escalated code cleared at
        self.isolated: dict[ChipKey, Isolation] = {}

    def set_rules(self, rules: FaultCustomization) -> None:
        """Use new rules (fault config reloaded). Counts of codes still under a frequency rule are kept; the others
        are forgotten, as the device plugin drops the cache of a code no longer configured."""
        self.rules = rules
        for key in [k for k in self._by_code if k[2] not in rules.frequency]:
            del self._by_code[key]

    def observe(self, fault: Fault) -> Fault:
        """Count `fault` (a newly appeared fault) and return it, escalated when a rule trips or its chip is
        isolated. Only chip and network faults naming chips count; the time is the fault's signal time, expiry is
        judged at its observed_at, and an occurrence already counted (the same signal time: the fault re-read at
        a new level) is not counted again. The level is only ever raised."""
        if fault.kind not in _KINDS or not fault.chips:
            return fault
        now = fault.observed_at
        level = fault.level
        isolate: timedelta | None = None
        for chip in fault.chips:
            iso = self.isolated.get((fault.node, chip))
            if iso is not None:
                iso.healthy_since = None
                level = max(level, QUARANTINE_LEVEL)
                isolate = iso.release
            for code in fault.codes:
                key = (fault.node, chip, code)
                drule = self.rules.duration.get(code)
                gone = self._recovered.get(key)
                if drule is not None and gone is not None:
                    if now - gone < timedelta(seconds=drule.recover_timeout_s):
                        level = max(level, drule.handling)
                    else:
                        del self._recovered[key]
                rule = self.rules.frequency.get(code)
                if rule is None:
                    continue
                times = self._by_code.setdefault(key, deque())
                _expire(times, now, timedelta(seconds=rule.time_window_s))
                if fault.signal_time not in times:
                    times.append(fault.signal_time)
                if len(times) >= rule.times:
                    level = max(level, rule.handling)
                    if rule.handling is QUARANTINE_LEVEL:
                        rel = timedelta(seconds=rule.release_s) if rule.release_s is not None else self.release
                        isolate = rel if isolate is None else max(isolate, rel)
            if self.threshold and counts_as_flap(fault.level):
                seen = self._seen.setdefault((fault.node, chip), deque())
                _expire(seen, now, self.window)
                if fault.signal_time not in seen:
                    seen.append(fault.signal_time)
                if len(seen) >= self.threshold:
                    level = QUARANTINE_LEVEL
                    isolate = self.release if isolate is None else max(isolate, self.release)
        if isolate is not None:
            for chip in fault.chips:
                iso = self.isolated.get((fault.node, chip))
                if iso is None:
                    self.isolated[(fault.node, chip)] = Isolation(now, fault.codes, isolate)
                else:
                    iso.release = max(iso.release, isolate)
            level = max(level, QUARANTINE_LEVEL)
            reason = fault.reason if fault.reason.endswith(FLAPPING_SUFFIX) else fault.reason + FLAPPING_SUFFIX
            return replace(fault, level=level, reason=reason)
        if level != fault.level:
            return replace(fault, level=level)
        return fault

    def is_isolated(self, node: str, chips: Iterable[str]) -> bool:
        """True when one of `chips` of `node` is isolated."""
        return any((node, c) in self.isolated for c in chips)

    def cleared(self, fault: Fault, now: datetime) -> None:
        """`fault` (one the tracker saw) is no longer reported at `now`: an isolated chip starts its healthy
        time; a duration-escalated code starts its recover time."""
        if fault.kind not in _KINDS:
            return
        for chip in fault.chips:
            iso = self.isolated.get((fault.node, chip))
            if iso is not None:
                iso.healthy_since = now
            for code in fault.codes:
                rule = self.rules.duration.get(code)
                if rule is not None and fault.level >= rule.handling:
                    self._recovered[(fault.node, chip, code)] = now

    def released(self, now: datetime) -> list[ChipKey]:
        """Chips whose isolation ends at `now` (healthy for their release time); they are forgotten."""
        out = [k for k, iso in self.isolated.items() if iso.healthy_since and now - iso.healthy_since >= iso.release]
        for key in out:
            del self.isolated[key]
            for k in [k for k in self._by_code if k[:2] == key]:
                del self._by_code[k]
            self._seen.pop(key, None)
        return out

    def release_node(self, node: str, before: datetime) -> list[ChipKey]:
        """A person released `node`'s quarantine at `before` (agent.core.quarantine.Release): end the isolation of
        its chips isolated at or before then, whether their fault still shows or not (a fault still reported stays
        active at its own level; the held clear of a healthy one goes out at the next tick). Their counts start
        again. Chips isolated after `before` stay isolated. Returns the chips released."""
        out = [k for k, iso in self.isolated.items() if k[0] == node and iso.since <= before]
        for key in out:
            del self.isolated[key]
            for k in [k for k in self._by_code if k[:2] == key]:
                del self._by_code[k]
            self._seen.pop(key, None)
        return out

    def duration_level(self, fault: Fault, now: datetime) -> FaultLevel | None:
        """The level a duration rule gives `fault` (still active at `now`), or None when no rule applies yet:
        a code with a ``FaultDuration`` rule whose ``FaultTimeout`` has passed since the fault's signal time."""
        if fault.kind not in _KINDS or not fault.chips:
            return None
        levels = [
            rule.handling
            for code in fault.codes
            if (rule := self.rules.duration.get(code)) is not None
            and now - fault.signal_time >= timedelta(seconds=rule.fault_timeout_s)
        ]
        return max(levels) if levels else None

    def count(self, node: str, chip: str, now: datetime) -> int:
        """Faults of (node, chip) the catch-all rule counted within its window ending at `now`."""
        times = self._seen.get((node, chip))
        if not times:
            return 0
        return sum(1 for t in times if now - t < self.window)

    def code_count(self, node: str, chip: str, code: str, now: datetime) -> int:
        """Occurrences of `code` on (node, chip) within its frequency rule's window ending at `now`."""
        rule = self.rules.frequency.get(code)
        times = self._by_code.get((node, chip, code))
        if rule is None or not times:
            return 0
        return sum(1 for t in times if now - t < timedelta(seconds=rule.time_window_s))

    def prune(self, now: datetime) -> None:
        """Forget counts older than their windows (call now and then to bound memory)."""
        for key in list(self._seen):
            _expire(self._seen[key], now, self.window)
            if not self._seen[key]:
                del self._seen[key]
        for ckey in list(self._by_code):
            rule = self.rules.frequency.get(ckey[2])
            if rule is not None:
                _expire(self._by_code[ckey], now, timedelta(seconds=rule.time_window_s))
            if rule is None or not self._by_code[ckey]:
                del self._by_code[ckey]


def _expire(times: deque[datetime], now: datetime, window: timedelta) -> None:
    """Drop occurrences older than `window` before `now` (MindCluster: before the window's start)."""
    while times and now - times[0] > window:
        times.popleft()
