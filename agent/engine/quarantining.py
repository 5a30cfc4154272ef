"""Quarantining nodes: the taint ``<policy.taint_key>=<level>:NoSchedule`` and the hold persisted beside it.

Every replica tracks each node's active quarantine reasons (so a new leader knows them); the leader brings each
node's taint and hold annotation in line with them, one task per node (:meth:`Quarantining.request_sync`). The
rules (which level, how long a hold lasts, the hold's JSON) are agent.core.quarantine's.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Hashable
from datetime import datetime, timedelta

import structlog

from agent.actions import Outcome
from agent.core.detect.gpu import nvsentinel_mark
from agent.core.faults import Fault, FaultCleared, FaultLevel
from agent.core.fence import NotLeader
from agent.core.policy import is_flapping
from agent.core.quarantine import (
    ISOLATED_CHIPS,
    QUARANTINE_HOLD,
    RELEASE_ANNOTATION,
    Release,
    encode_quarantine_hold,
    hold_since,
    hold_until,
    isolation_needs_taint,
    parse_quarantine_hold,
    parse_release,
    quarantine_for,
    wanted_level,
)
from agent.engine.context import EngineContext
from agent.sinks import events as ev

log = structlog.get_logger(__name__)


class Quarantining:
    """The nodes' quarantine reasons, flap holds and the taints and holds this replica wrote."""

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self.tainted: dict[str, FaultLevel] = {}  # node -> level of the quarantine taint we set
        self.deferred: dict[str, FaultLevel] = {}  # node -> level of the taint left to NVSentinel (logged once)
        self.reasons: dict[str, dict[Hashable, FaultLevel]] = {}  # node -> active fault key -> level
        # (node, hold key) -> until when a quarantine hold persisted on the node (by an earlier version, for a
        # flapping chip) keeps the node quarantined
        self.flap_holds: dict[tuple[str, Hashable], datetime] = {}
        # node -> fault key -> the chips of an active fault of an isolated (flapping) chip: the node is quarantined
        # only when detect.isolated_chips_taint of its chips are isolated
        self.isolated_chips: dict[str, dict[Hashable, tuple[str, ...]]] = {}
        # node -> fault key -> the most chips one live pod on the node using that fault's chips held when the
        # fault was noted (the job it hit): the node is quarantined once it can no longer hold such a pod
        self.isolated_need: dict[str, dict[Hashable, int]] = {}
        # (node, fault key) -> signal time + detect.isolation_release_s of an isolated chip's active fault: the
        # least time a node quarantined for its isolated chips stays so (persisted as its hold, see _sync_hold)
        self.flap_active: dict[tuple[str, Hashable], datetime] = {}
        # the quarantine holds persisted on the nodes (annotation with the taint's key): read once per term, and
        # the value this replica last wrote per node
        self.holds_loaded = False
        self.hold_written: dict[str, str | None] = {}
        # dry-run: the quarantine taints nodes would carry had the skipped writes been made (None: removed)
        self.dry_taints: dict[str, str | None] = {}
        # nodes whose quarantine taint a task is syncing now / must sync again when it is done
        self.syncing: set[str] = set()
        self.dirty: set[str] = set()
        # node -> when its current hold began (the `since` written with it, so a person's release lifts only holds
        # that began before it); node -> the `at` of the last release this replica took up as leader
        self.hold_started: dict[str, datetime | None] = {}  # None: a hold read back without one (kept so)
        self.released: dict[str, datetime] = {}

    def new_term(self) -> None:
        """A new leadership term: read the holds persisted on the nodes again (a previous leader's, or this
        replica's before a restart)."""
        self.holds_loaded = False
        self.load_holds()

    def note(self, fault: Fault, active: bool) -> bool:
        """Track the node's active quarantine reasons (on every replica, so a new leader knows them): node faults
        (:func:`agent.core.quarantine.quarantine_for`), and isolated chips once ``detect.isolated_chips_taint`` of
        the node's chips are isolated or the node can no longer hold a pod of a job they hit
        (:func:`agent.core.quarantine.isolation_needs_taint`: the pods on the node using the chips when their fault
        is noted give what such a pod needs). Returns True when `fault` may change the node's quarantine."""
        detect = self.ctx.settings.detect
        if fault.node and fault.chips and is_flapping(fault):
            chips = self.isolated_chips.setdefault(fault.node, {})
            need = self.isolated_need.setdefault(fault.node, {})
            release = timedelta(seconds=detect.isolation_release_s)
            if active:
                chips[fault.key] = fault.chips
                self.flap_active[(fault.node, fault.key)] = fault.signal_time + release
                # kept at its largest: the same fault noted again once the job has left the chip still needs it
                need[fault.key] = max(need.get(fault.key, 0), self._chips_needed(fault.node, fault.chips))
            else:
                chips.pop(fault.key, None)
                need.pop(fault.key, None)
                self.flap_active.pop((fault.node, fault.key), None)
            isolated = {c for cs in chips.values() for c in cs}
            if not chips:
                del self.isolated_chips[fault.node]
            if not need:
                del self.isolated_need[fault.node]
            rec = self.ctx.state.nodes.get(fault.node)
            capacity = (
                None if rec is None else (rec.npu_capacity if rec.npu_capacity is not None else rec.npu_allocatable)
            )
            needed = max(need.values(), default=0)
            reasons = self.reasons.setdefault(fault.node, {})
            if isolation_needs_taint(capacity, len(isolated), needed, detect.isolated_chips_taint):
                if ISOLATED_CHIPS not in reasons:
                    log.warning(
                        "isolated chips keep jobs off the node: quarantined",
                        node=fault.node, chips=sorted(isolated), capacity=capacity, pod_needs=needed,
                    )  # fmt: skip
                reasons[ISOLATED_CHIPS] = FaultLevel.MANUALLY_SEPARATE
            else:
                reasons.pop(ISOLATED_CHIPS, None)
            if not reasons:
                del self.reasons[fault.node]
            return True
        level = quarantine_for(fault, sub_health=self.ctx.settings.policy.sub_health_taint)
        if level is None:
            return False
        reasons = self.reasons.setdefault(fault.node, {})
        if active:
            reasons[fault.key] = level
        else:
            reasons.pop(fault.key, None)
            if not reasons:
                del self.reasons[fault.node]
        return True

    def _chips_needed(self, node: str, chips: tuple[str, ...]) -> int:
        """The most chips one live pod on `node` holding one of `chips` holds (0: none): what a pod of the job an
        isolated chip's fault hit needs wherever it is placed again."""
        hit = set(chips)
        return max(
            (
                len(p.chips)
                for p in self.ctx.state.pods_on_node(node)
                if p.deletion_timestamp is None and hit & set(p.chips)
            ),
            default=0,
        )

    async def cleared(self, cleared: FaultCleared, published: Awaitable[None] | None = None) -> None:
        """A fault went away: when it was the node's last quarantine reason, remove our taint (only ours). An
        isolated (flapping) chip's fault clears only when the detector releases the chip (agent.core.detect.flapping:
        healthy for its release time), so a node quarantined for its isolated chips stays so until then.

        `published`: done once the fault's fault.cleared is durable; awaited before the quarantine it lifts
        changes (not at all when the fault does not touch the node's quarantine)."""
        if self.note(cleared.fault, active=False):
            if published is not None:
                await published  # fault.cleared on disk before the quarantine it lifts changes
            await self.request_sync(cleared.fault.node)

    def _current_taint(self, node: str) -> str | None:
        if self.ctx.writer.dry_run and node in self.dry_taints:
            return self.dry_taints[node]  # what a skipped write would have left there: said once per change
        rec = self.ctx.state.nodes.get(node)
        if rec is None:
            return None
        for taint in rec.taints:
            if taint.key == self.ctx.settings.policy.taint_key:
                return taint.value
        return None

    async def request_sync(self, node: str) -> None:
        """Bring `node`'s quarantine taint in line with its active reasons (:meth:`sync_node`) in a task of that
        node's own, so the recovery loop goes on to the next fault without waiting for it; a request made while
        the node's task runs makes it sync once more, so the node ends with the taint of the latest state."""
        if node in self.syncing:
            self.dirty.add(node)
            return
        self.syncing.add(node)
        self.ctx.tasks(self._worker(node), f"taint:{node}")

    async def _worker(self, node: str) -> None:
        try:
            while True:
                self.dirty.discard(node)
                try:
                    await self.sync_node(node)
                except asyncio.CancelledError:
                    raise
                except NotLeader:
                    return
                except Exception:  # last resort of the taint-sync task: a bug on one node must not end the task group
                    log.exception("quarantine taint sync failed", node=node)
                if node not in self.dirty:
                    return
        finally:
            self.syncing.discard(node)

    async def sync_node(self, node: str) -> None:
        """Make `node`'s quarantine taint match its active reasons (:meth:`_sync_taint`) and persist its hold next
        to it (:meth:`_sync_hold`). Leader only; idempotent."""
        if not self.ctx.term.is_leader():
            return
        if not self.holds_loaded:
            self.load_holds()
        await self._sync_taint(node)
        await self._sync_hold(node)

    def load_holds(self) -> None:
        """Adopt the quarantine holds persisted on the nodes (see :meth:`_sync_hold`): each keeps its node
        quarantined until its time (lifted by :meth:`expire_flap_holds` at the first tick after it), whatever
        the detectors of this replica have seen. An unreadable annotation is logged and ignored."""
        key = self.ctx.settings.policy.taint_key
        for name, rec in list(self.ctx.state.nodes.items()):
            text = rec.annotation(key)
            if not text:
                continue
            try:
                level, until = parse_quarantine_hold(text)
            except ValueError as e:
                log.warning("quarantine hold annotation unreadable; ignored", node=name, key=key, error=str(e))
                continue
            since = hold_since(text)
            release = self._release_of(name)
            if release is not None and (since is None or since <= release.at):
                log.info("quarantine hold released by a person; not kept", node=name, by=release.by)
                continue
            self.hold_started[name] = since
            hold = (name, QUARANTINE_HOLD)
            self.flap_holds[hold] = max(until, self.flap_holds.get(hold, until))
            self.reasons.setdefault(name, {})[QUARANTINE_HOLD] = level
            self.hold_written[name] = text
            log.info(
                "quarantine hold read back from the node", node=name, until=until.isoformat(), level=level.wire_name
            )
        self.holds_loaded = True

    async def _sync_hold(self, node: str) -> None:
        """Persist `node`'s quarantine hold (a node quarantined for its isolated chips: at least until each chip's
        fault signal time + detect.isolation_release_s; a hold read back from the node) as the annotation
        ``<policy.taint_key>: {"level": …, "until": …}`` next to the taint, so a restarted agent or a new leader
        keeps the node quarantined until that time; removed once the node has no hold. A merge patch of one
        annotation (RBAC: nodes patch, as for the taint)."""
        key = self.ctx.settings.policy.taint_key
        rec = self.ctx.state.nodes.get(node)
        if rec is None:
            return
        wanted = wanted_level(self.reasons.get(node))
        isolated = ISOLATED_CHIPS in self.reasons.get(node, {})
        until = hold_until(node, self.flap_holds, self.flap_active if isolated else {}) if wanted is not None else None
        if wanted is None or until is None:
            value = None
            self.hold_started.pop(node, None)
        else:
            since = self.hold_started.setdefault(node, self.ctx.clock.now())
            value = encode_quarantine_hold(wanted, until, since)
        current = rec.annotation(key)
        if value == current or (node in self.hold_written and self.hold_written[node] == value):
            return
        result = await self.ctx.writer.annotate_node(node, {key: value})
        if result.ok:
            self.hold_written[node] = value

    async def _sync_taint(self, node: str) -> None:
        """Make `node`'s quarantine taint match its active reasons: set ``<key>=<level>:NoSchedule`` or remove
        only our taint. Leader only; idempotent (the writer re-reads the node)."""
        if not self.ctx.term.is_leader():
            return
        wanted = wanted_level(self.reasons.get(node))
        if wanted is None:
            self.deferred.pop(node, None)
        key = self.ctx.settings.policy.taint_key
        writer, metrics = self.ctx.writer, self.ctx.metrics
        if wanted is not None:
            mark = self._nvsentinel_holds(node)
            if mark:
                await self._leave_to_nvsentinel(node, wanted, mark)
                return
            if self.tainted.get(node) == wanted and self._current_taint(node) == wanted.wire_name:
                return
            result = await writer.taint_node(node, key=key, value=wanted.wire_name)
            metrics.action("taint", result.outcome.value)
            if result.ok:
                self.tainted[node] = wanted
            if result.outcome is Outcome.DRY_RUN:
                self.dry_taints[node] = wanted.wire_name
        elif node in self.tainted or self._current_taint(node) is not None:
            result = await writer.untaint_node(node, key=key)
            metrics.action("untaint", result.outcome.value)
            if result.ok:
                self.tainted.pop(node, None)
            if result.outcome is Outcome.DRY_RUN:
                self.dry_taints[node] = None

    def _nvsentinel_holds(self, node: str) -> str:
        """NVSentinel's mark on `node` (agent.core.detect.gpu.nvsentinel_mark: its state or cordon-by label,
        fault-quarantine's cordon annotation), "" when it does not hold the node or policy.defer_to_nvsentinel is
        off."""
        if not self.ctx.settings.policy.defer_to_nvsentinel:
            return ""
        rec = self.ctx.state.nodes.get(node)
        return nvsentinel_mark(rec.labels, rec.annotations) if rec is not None else ""

    async def _leave_to_nvsentinel(self, node: str, wanted: FaultLevel, mark: str) -> None:
        """Observe, don't fight: NVSentinel holds `node` (`mark`), so its quarantine is NVSentinel's. The agent adds
        no taint (counted as a taint ``deferred``, logged once per node and level) and lifts one it set before
        NVSentinel took the node (handed over; the periodic reconcile brings it here). Should NVSentinel let the node
        go while a reason is still active, the next sync taints it again. The jobs hit are restarted all the same."""
        if self.deferred.get(node) != wanted:
            self.deferred[node] = wanted
            self.ctx.metrics.action("taint", "deferred")
            log.info(
                "node held by NVSentinel: no quarantine taint of the agent's; the jobs hit are still restarted",
                node=node, level=wanted.wire_name, nvsentinel=mark,
            )  # fmt: skip
        if node not in self.tainted and self._current_taint(node) is None:
            return
        result = await self.ctx.writer.untaint_node(node, key=self.ctx.settings.policy.taint_key)
        self.ctx.metrics.action("untaint", result.outcome.value)
        if result.ok:
            self.tainted.pop(node, None)
            log.info("quarantine handed over to NVSentinel: the agent's taint lifted", node=node, nvsentinel=mark)
        if result.outcome is Outcome.DRY_RUN:
            self.dry_taints[node] = None

    def _release_of(self, node: str) -> Release | None:
        """The person's release recorded on `node` (:data:`RELEASE_ANNOTATION`), None when none or unreadable (the
        detect pipeline reports an unreadable one)."""
        rec = self.ctx.state.nodes.get(node)
        text = rec.annotation(RELEASE_ANNOTATION) if rec is not None else None
        if not text:
            return None
        try:
            return parse_release(text)
        except ValueError:
            return None

    async def take_releases(self) -> int:
        """Leader: take up the releases people wrote on quarantined nodes (``fault-agent quarantine release``) that
        this replica has not taken up yet: lift the node's holds that began before the release, let its isolated
        chips go (the detect pipeline ends their isolation on every replica, and their held clears lift that
        reason), sync the taint and publish ``quarantine.released`` (who, when, why, the chips, the hold lifted,
        and the level a fault still reported keeps the node at). Looks only at nodes this replica quarantines or
        holds. Returns the releases taken up."""
        nodes = set(self.reasons) | set(self.tainted) | {n for n, _ in self.flap_holds} | set(self.hold_written)
        taken = 0
        for node in sorted(nodes):
            release = self._release_of(node)
            if release is None or self.released.get(node, release.at - timedelta(seconds=1)) >= release.at:
                continue
            self.released[node] = release.at
            taken += 1
            lifted = hold_until(node, self.flap_holds)
            for hold in [h for h in self.flap_holds if h[0] == node]:
                del self.flap_holds[hold]
            reasons = self.reasons.get(node, {})
            reasons.pop(QUARANTINE_HOLD, None)
            chips = sorted({c for cs in self.isolated_chips.get(node, {}).values() for c in cs})
            for key in [k for k in self.flap_active if k[0] == node]:
                lifted = max(lifted, self.flap_active[key]) if lifted is not None else self.flap_active[key]
                del self.flap_active[key]  # the isolation ends: its clear (or the fault's own) follows
            self.hold_started.pop(node, None)
            left = {k: v for k, v in reasons.items() if k != ISOLATED_CHIPS}
            if not reasons:
                self.reasons.pop(node, None)
            still = wanted_level(left)
            log.warning("quarantine released by a person", node=node, by=release.by, reason=release.reason,
                        chips=chips, still_quarantined=still.wire_name if still else None)  # fmt: skip
            await self.ctx.publish(
                functools.partial(
                    ev.quarantine_released,
                    node,
                    cluster=self.ctx.settings.cluster_name,
                    at=release.at,
                    by=release.by,
                    reason=release.reason,
                    chips=chips,
                    hold_until=lifted,
                    still_quarantined=still.wire_name if still else None,
                )
            )
            await self.request_sync(node)
        return taken

    async def expire_flap_holds(self, now: datetime) -> None:
        """Lift the quarantine of healed flapping chips whose flap window has passed."""
        for (node, key), until in list(self.flap_holds.items()):
            if now < until:
                continue
            del self.flap_holds[(node, key)]
            reasons = self.reasons.get(node, {})
            reasons.pop(key, None)
            if not reasons:
                self.reasons.pop(node, None)
            await self.request_sync(node)

    async def reconcile(self) -> None:
        """Every node's quarantine taint against its active reasons: removes taints we set before a restart
        whose fault cleared while no agent was looking, and sets missing ones. Looks only at the nodes that may
        need it (a quarantine reason, a taint this replica set or would have set in dry-run, or the taint key on
        the watched node: the state's taint index), so its work is bounded by them, not by the cluster; in name
        order."""
        state = self.ctx.state
        candidates = set(self.reasons) | set(self.tainted) | state.nodes_tainted(self.ctx.settings.policy.taint_key)
        candidates |= {node for node, value in self.dry_taints.items() if value is not None}
        for node in sorted(n for n in candidates if n in state.nodes):
            if (
                wanted_level(self.reasons.get(node)) is not None
                or self._current_taint(node) is not None
                or node in self.tainted
            ):
                await self.request_sync(node)
