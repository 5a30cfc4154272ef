"""Compare the previous and the new view of one watched object: what appeared, what went away. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from agent.core.detect.common import DetectResult, Identity
from agent.core.faults import Fault, FaultCleared, FaultLevel, ObjectRef


@dataclass(frozen=True, slots=True)
class Seen:
    """A fault in a view: `level` as read (before any flapping escalation) and the Fault as emitted."""

    level: FaultLevel
    fault: Fault


View = dict[Identity, Seen]


def diff_views(
    old: Mapping[Identity, Seen], new: Mapping[Identity, Fault], now: datetime, source: ObjectRef, out: DetectResult
) -> tuple[View, list[Identity]]:
    """Merge `new` (identity → freshly read Fault) into `old`.

    Same identity and same level: the old entry is kept (its signal time and reason stick), nothing is emitted.
    A new identity, or a level change, emits a Fault (a level change first clears the old one). An identity
    missing from `new` emits a FaultCleared at `now`.

    Returns:
        (the merged view, identities whose Fault is new: the caller may escalate them and update the view).
    """
    view: View = {}
    fresh: list[Identity] = []
    for ident, fault in new.items():
        prev = old.get(ident)
        if prev is not None and prev.level == fault.level:
            view[ident] = prev
            continue
        if prev is not None:
            out.cleared.append(FaultCleared(prev.fault, now, source))
        view[ident] = Seen(fault.level, fault)
        fresh.append(ident)
    for ident, prev in old.items():
        if ident not in new:
            out.cleared.append(FaultCleared(prev.fault, now, source))
    return view, fresh


def clear_all(old: Mapping[Identity, Seen], now: datetime, source: ObjectRef, out: DetectResult) -> None:
    """Emit a FaultCleared for every fault of `old` (the object was deleted: NodeD's recovery signal)."""
    for prev in old.values():
        out.cleared.append(FaultCleared(prev.fault, now, source))
