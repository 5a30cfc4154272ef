"""Quarantine rules: which taint level a node should carry, and the hold that keeps it quarantined.

A node's quarantine *reasons* map each active fault key (or :data:`QUARANTINE_HOLD`) to the level it asks for; the
node's taint carries the highest. A node quarantined for its isolated (flapping) chips stays so at least until each
chip's fault signal time + ``detect.isolation_release_s`` (a *hold*, persisted on the node as the annotation
``<policy.taint_key>`` so a new leader keeps it).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from agent.core.faults import Fault, FaultKind, FaultLevel


def quarantine_for(fault: Fault, *, sub_health: bool = False) -> FaultLevel | None:
    """The level to quarantine `fault.node` with (a ``NoSchedule`` taint), or None.

    Node faults at ``PreSeparateFault`` or above quarantine the node. Chip faults never do on their own, flapping
    ones included: a flapping chip is isolated, not its node, as MindCluster does (the engine taints the node only
    when its isolated chips keep jobs off it: :func:`isolation_needs_taint`). With `sub_health`
    (``policy.sub_health_taint``) a card or switch sub-health fault quarantines the node at ``SubHealthFault``
    (:func:`is_sub_healthy_node`).
    """
    if not fault.node:
        return None
    if fault.kind is FaultKind.NODE and fault.level >= FaultLevel.PRE_SEPARATE:
        return fault.level
    if sub_health and is_sub_healthy_node(fault):
        return FaultLevel.SUB_HEALTH
    return None


def is_sub_healthy_node(fault: Fault) -> bool:
    """Whether `fault` makes its node one MindCluster's scheduler refuses to a job whose ``subHealthyStrategy`` is
    not ``ignore``: a card sub-health fault (a chip's ``-Fault`` entry at ``SubHealthFault``) or a switch one
    (``SwitchInfoCfg`` ``NodeStatus: SubHealthy``), from the node's ConfigMaps or ClusterD's (not a fault that names
    a pod, such as a hot switch's ``HotSwitchDelete``). Source: ``component/ascend-for-volcano/internal/rescheduling/
    reschedule.go`` ``checkNodeCurNodeIsFault`` (``HasCardSubHealthFault``, ``HasSwitchSubHealthFault``), called
    from the node predicate ``plugin/node.go`` ``NodePredicate`` → ``CheckNodeNPUByTask``. The taint this asks for
    carries the level's name, ``SubHealthFault``, as its value: a job that may use such a node tolerates exactly that
    value, never a node taken out for a real fault. Pure."""
    return (
        bool(fault.node)
        and fault.pod is None
        and fault.kind in (FaultKind.CHIP, FaultKind.NODE)
        and fault.level is FaultLevel.SUB_HEALTH
    )


QUARANTINE_HOLD = ("quarantine-hold",)
"""The quarantine reason (and flap hold) key of a hold read back from a node's annotation."""
ISOLATED_CHIPS = ("isolated-chips",)
"""Quarantine reason of a node whose isolated (flapping) chips keep its jobs off it: detect.isolated_chips_taint of
them, or fewer that leave the node unable to hold a pod of a job they hit (:func:`isolation_needs_taint`)."""


def isolation_needs_taint(capacity: int | None, isolated: int, needed: int, limit: int) -> bool:
    """True when a node's isolated chips must quarantine the whole node (a ``NoSchedule`` taint) for the isolation
    to hold where pods are placed.

    The agent has no lever on one chip: the device plugin reports the chips it finds healthy to the kubelet, and
    MindCluster's scheduler plugin picks among the chips its ConfigMap does not list unhealthy, so a chip only the
    agent isolated (its catch-all rule, or a rule the node's plugin does not share) is handed out again once the
    plugin reports it healthy. The node is taken out when

    - `limit` > 0 and `isolated` >= `limit` (settings detect.isolated_chips_taint), or
    - the node can no longer hold a pod of a job the isolated chips hit: such a pod needs `needed` chips and
      only `capacity` - `isolated` are left, so any placement of it on this node puts it back on an isolated chip.

    Args:
        capacity: the node's NPU capacity (every chip, healthy or not; the resource's ``status.capacity``), None
            when unknown (then only the `limit` rule applies).
        isolated: the node's isolated chips (>= 0).
        needed: the most chips one pod of a job hit by the isolated chips' faults asked for (0: none known).
        limit: detect.isolated_chips_taint (0: off).
    """
    if limit and isolated >= limit:
        return True
    return capacity is not None and isolated > 0 and needed > capacity - isolated


def encode_quarantine_hold(level: FaultLevel, until: datetime, since: datetime | None = None) -> str:
    """The node annotation value of a quarantine hold: ``{"level":"SeparateNPU","since":"<ISO 8601, UTC>",
    "until":"<ISO 8601, UTC>"}``; ``since`` (when the hold was written) is left out when None (versions before it
    wrote none)."""
    doc = {"level": level.wire_name, "until": until.astimezone(UTC).isoformat()}
    if since is not None:
        doc["since"] = since.astimezone(UTC).isoformat()
    return json.dumps(doc, sort_keys=True)


def hold_since(text: str) -> datetime | None:
    """The ``since`` of a hold written by :func:`encode_quarantine_hold`, None when it has none or it cannot be
    read (a hold from a version before it: older than any release)."""
    try:
        doc = json.loads(text)
        since = datetime.fromisoformat(doc["since"]) if isinstance(doc, dict) and "since" in doc else None
    except (ValueError, TypeError):
        return None
    return since if since is not None and since.tzinfo is not None else None


RELEASE_ANNOTATION = "fault-agent.io/quarantine-release"
"""Node annotation a person's ``fault-agent quarantine release`` writes: :class:`Release` as JSON. It stays on the
node as the record of who released it; every replica lifts what was isolated or held on the node before its
``at`` (agent.engine.quarantining, agent.engine.detecting), nothing that came later."""
MAX_RELEASE_REASON = 256


@dataclass(frozen=True, slots=True)
class Release:
    """A person released a node's quarantine early (the hardware was replaced or checked).

    Attributes:
        by: who (non-empty, printable).
        at: when (UTC); isolations and holds that began at or before it are lifted.
        reason: why (at most :data:`MAX_RELEASE_REASON` characters; may be empty).
    """

    by: str
    at: datetime
    reason: str = ""


def encode_release(release: Release) -> str:
    """The :data:`RELEASE_ANNOTATION` value: ``{"at":"<ISO 8601, UTC>","by":"…","reason":"…"}``."""
    return json.dumps(
        {"at": release.at.astimezone(UTC).isoformat(), "by": release.by, "reason": release.reason}, sort_keys=True
    )


def parse_release(text: str) -> Release:
    """Read :func:`encode_release`'s JSON.

    Raises:
        ValueError: not JSON, not an object, no ``by``, an ``at`` that is no time with a zone, a reason that is
            not text or too long; says which.
    """
    try:
        doc = json.loads(text)
    except ValueError:
        raise ValueError(f"not JSON: {text[:60]!r}") from None
    if not isinstance(doc, dict):
        raise ValueError(f'expected {{"at": <time>, "by": <who>, "reason": <why>}}, got {text[:60]!r}')
    by, at_text, reason = doc.get("by"), doc.get("at"), doc.get("reason", "")
    if not isinstance(by, str) or not by.strip() or not by.isprintable():
        raise ValueError(f"by: expected a printable name, got {by!r}")
    if not isinstance(reason, str) or len(reason) > MAX_RELEASE_REASON:
        raise ValueError(f"reason: expected text of at most {MAX_RELEASE_REASON} characters")
    if not isinstance(at_text, str):
        raise ValueError(f"at: expected an ISO 8601 time, got {at_text!r}")
    try:
        at = datetime.fromisoformat(at_text)
    except ValueError:
        raise ValueError(f"at: not an ISO 8601 time: {at_text[:40]!r}") from None
    if at.tzinfo is None:
        raise ValueError(f"at has no time zone: {at_text!r}")
    return Release(by.strip(), at.astimezone(UTC), reason)


def parse_quarantine_hold(text: str) -> tuple[FaultLevel, datetime]:
    """Read :func:`encode_quarantine_hold`'s JSON: (level, until).

    Raises:
        ValueError: not JSON, not an object, an unknown level, or an until without a time zone; says which.
    """
    try:
        doc = json.loads(text)
    except ValueError:
        raise ValueError(f"not JSON: {text[:60]!r}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("level"), str) or not isinstance(doc.get("until"), str):
        raise ValueError(f'expected {{"level": <level>, "until": <ISO 8601 time>}}, got {text[:60]!r}')
    level = FaultLevel.parse(doc["level"])
    until = datetime.fromisoformat(doc["until"])
    if until.tzinfo is None:
        raise ValueError(f"until has no time zone: {doc['until']!r}")
    return level, until


def wanted_level(reasons: Mapping[Hashable, FaultLevel] | None) -> FaultLevel | None:
    """The level of the taint a node with these active quarantine reasons carries (None: no taint)."""
    return max(reasons.values()) if reasons else None


def hold_until(node: str, *holds: Mapping[tuple[str, Hashable], datetime]) -> datetime | None:
    """The latest time any of `holds` (``(node, fault key) -> until``) keeps `node` quarantined (None: none)."""
    times = [until for hold in holds for (n, _), until in hold.items() if n == node]
    return max(times) if times else None
