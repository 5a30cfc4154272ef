"""Plain data shared by the pure core (detect, correlate, policy) and the edges.

Nothing here does I/O or reads the clock. Formats and level semantics follow `shared/DOMAIN.md` §1–§3
(MindCluster's device plugin, NodeD and fault-level documentation).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class FaultKind(enum.StrEnum):
    """Where a fault comes from; decides which jobs it hits and whether it counts against a retry budget."""

    CHIP = "chip"  # an NPU reported faulty by the device plugin
    NETWORK = "network"  # an NPU's parameter-plane network (CardNetworkUnhealthy)
    NODE = "node"  # the whole node: NodeD hardware fault, NotReady, problem-detector condition
    BUSINESS = "business"  # the training process failed on healthy hardware
    DISRUPTION = "disruption"  # eviction, preemption, node drain: never consumes the business budget


class FaultLevel(enum.IntEnum):
    """Chip and node fault levels, ordered by severity (higher is more severe).

    The chip order is the vendor's: ManuallySeparateNPU > SeparateNPU > PreSeparateNPU > RestartNPU >
    FreeRestartNPU > RestartBusiness > RestartRequest > SubHealthFault > NotHandleFault. NodeD's three node
    levels are folded onto the same scale (NotHandleFault, PreSeparateFault ~ PreSeparateNPU,
    SeparateFault ~ SeparateNPU) so "most severe wins" works across sources.
    """

    NOT_HANDLE = 0
    SUB_HEALTH = 10
    RESTART_REQUEST = 20
    RESTART_BUSINESS = 30
    FREE_RESTART_NPU = 40
    RESTART_NPU = 50
    PRE_SEPARATE = 60
    SEPARATE = 70
    MANUALLY_SEPARATE = 80

    @property
    def wire_name(self) -> str:
        """The vendor's chip-level spelling, e.g. ``SeparateNPU``."""
        return _WIRE_NAMES[self]

    @classmethod
    def parse(cls, text: str) -> FaultLevel:
        """Map a vendor level name (chip or NodeD spelling, e.g. ``SeparateNPU``, ``PreSeparateFault``).

        Raises:
            ValueError: the name is not a known level (empty included).
        """
        try:
            return _BY_NAME[text]
        except KeyError:
            raise ValueError(f"unknown fault level {text!r}") from None

    @property
    def takes_chip_out(self) -> bool:
        """True for the levels whose jobs are rescheduled at once (RestartRequest … ManuallySeparateNPU,
        except PreSeparateNPU, which leaves a running job alone)."""
        return self >= FaultLevel.RESTART_REQUEST and self is not FaultLevel.PRE_SEPARATE


_WIRE_NAMES: dict[FaultLevel, str] = {
    FaultLevel.NOT_HANDLE: "NotHandleFault",
    FaultLevel.SUB_HEALTH: "SubHealthFault",
    FaultLevel.RESTART_REQUEST: "RestartRequest",
    FaultLevel.RESTART_BUSINESS: "RestartBusiness",
    FaultLevel.FREE_RESTART_NPU: "FreeRestartNPU",
    FaultLevel.RESTART_NPU: "RestartNPU",
    FaultLevel.PRE_SEPARATE: "PreSeparateNPU",
    FaultLevel.SEPARATE: "SeparateNPU",
    FaultLevel.MANUALLY_SEPARATE: "ManuallySeparateNPU",
}

_BY_NAME: dict[str, FaultLevel] = {name: level for level, name in _WIRE_NAMES.items()} | {
    "NotHandleFault": FaultLevel.NOT_HANDLE,
    "PreSeparateFault": FaultLevel.PRE_SEPARATE,
    "SeparateFault": FaultLevel.SEPARATE,
}


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """A Kubernetes object by kind, namespace (empty for cluster-scoped) and name; uid when known."""

    kind: str
    namespace: str
    name: str
    uid: str = ""

    def __str__(self) -> str:
        ns = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind}/{ns}{self.name}"


@dataclass(frozen=True, slots=True)
class Fault:
    """One hardware or workload fault as the cluster reported it.

    Attributes:
        kind: where it comes from (see FaultKind).
        level: its severity after the level table and overrides were applied.
        node: the node's name ("" when unknown, e.g. a pod not yet scheduled).
        chips: chip names as the device plugin spells them, e.g. ("Ascend910-3",); empty for node-wide faults.
        codes: the vendor's fault identities: MindCluster's 8-hex-digit codes in upper case (9-digit public-fault
            codes); for a GPU ``XID-<n>``, ``SXID-<n>`` or a DCGM code (agent.core.detect.gpu); for business faults
            the exit code as text.
        signal_time: when the reporting component saw it (UTC): fault_time, UpdateTime, a condition's
            lastTransitionTime or a container's finishedAt.
        observed_at: when the agent read it (UTC); observed_at - signal_time is the detection lag.
        source: the object it was read from.
        reason: a short machine-readable reason, e.g. "CardUnhealthy", "NotReady", "OOMKilled".
        check_code_ok: False when the ConfigMap's CheckCode did not match its content.
        pod: for business faults and disruptions, the pod that failed.
        detail: the reporter's own words for people, e.g. a node condition's ``<reason>: <message>``
            (``XidError48: DBE``), at most 512 characters; "" when it gave none.
        devices: the devices the reporter named beyond `chips`, ``<type>:<value>`` as NVSentinel writes its
            entities (``GPU:GPU-8f3c…``, ``PCI:0000:3b:00``); a device plugin does not say which pod holds them,
            DRA does (agent.core.devices.device_refs, agent.core.dra).
    """

    kind: FaultKind
    level: FaultLevel
    node: str
    chips: tuple[str, ...]
    codes: tuple[str, ...]
    signal_time: datetime
    observed_at: datetime
    source: ObjectRef
    reason: str = ""
    check_code_ok: bool = True
    pod: ObjectRef | None = None
    detail: str = ""
    devices: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
        """Identity used for diffing: the same key seen again is the same fault, not a new one."""
        return (self.kind.value, self.node, self.chips, self.codes)


@dataclass(frozen=True, slots=True)
class FaultCleared:
    """A fault that the cluster no longer reports (chip healthy again, NodeD ConfigMap deleted, node Ready)."""

    fault: Fault
    cleared_at: datetime
    source: ObjectRef


@dataclass(frozen=True, slots=True)
class Rejection:
    """Bad input that was skipped: what it came from, a short reason slug and a detail for the log line.

    The caller logs each rejection once (with `source`) and counts it in
    ``fault_agent_input_rejected_total{source=<source.kind>, reason=<reason>}``.
    Reasons are stable slugs such as ``"json-truncated"``, ``"bad-check-code"``, ``"unknown-level"``.
    """

    source: ObjectRef
    reason: str
    detail: str = ""


def fault_identity(fault: Fault) -> tuple[object, ...]:
    """The same fault reported again (a relist, a re-evaluation) has the same identity: (key, pod, level, signal
    time). The one identity of a fault across the engine (handled faults, the jobs a fault hit)."""
    return (fault.key, fault.pod, fault.level, fault.signal_time)
