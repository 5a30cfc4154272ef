"""Quarantine rules: which taint level a node should carry, and the hold that keeps it quarantined.

A node's quarantine *reasons* map each active fault key (or :data:`QUARANTINE_HOLD`) to the level it asks for; the
node's taint carries the highest. A node quarantined for its isolated (flapping) chips stays so at least until each
chip's fault signal time + ``detect.isolation_release_s`` (a *hold*, persisted on the node as the annotation
``<policy.taint_key>`` so a new leader keeps it).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from datetime import UTC, datetime

from agent.core.faults import Fault, FaultKind, FaultLevel


def quarantine_for(fault: Fault) -> FaultLevel | None:
    """The level to quarantine `fault.node` with (a ``NoSchedule`` taint), or None.

    Node faults at ``PreSeparateFault`` or above quarantine the node. Chip faults never do on their own, flapping
    ones included: a flapping chip is isolated, not its node, as MindCluster does (the engine taints the node only
    when ``detect.isolated_chips_taint`` of its chips are isolated).
    """
    if not fault.node:
        return None
    if fault.kind is FaultKind.NODE and fault.level >= FaultLevel.PRE_SEPARATE:
        return fault.level
    return None


QUARANTINE_HOLD = ("quarantine-hold",)
"""The quarantine reason (and flap hold) key of a hold read back from a node's annotation."""
ISOLATED_CHIPS = ("isolated-chips",)
"""Quarantine reason of a node with detect.isolated_chips_taint isolated (flapping) chips."""


def encode_quarantine_hold(level: FaultLevel, until: datetime) -> str:
    """The node annotation value of a quarantine hold: ``{"level":"SeparateNPU","until":"<ISO 8601, UTC>"}``."""
    return json.dumps({"level": level.wire_name, "until": until.astimezone(UTC).isoformat()}, sort_keys=True)


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
