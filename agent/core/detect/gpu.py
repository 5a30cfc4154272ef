"""GPU faults on Node conditions, in NVIDIA's own words, and the agent's level for each. Pure: no I/O, no clock.

Two shapes of condition carry GPU faults (docs/nvsentinel.md has the sources, commits and the whole table):

- NVSentinel's platform-connectors write one condition per health check of a *fatal* health event
  (``platform-connectors/pkg/connectors/kubernetes/process_node_events.go``): ``type`` = the check's name
  (``SysLogsXIDError``, ``SysLogsSXIDError``, ``SysLogsGPUFallenOff``, ``GpuMemWatch``, ``GpuPcieWatch``, …),
  ``status`` ``True`` while unhealthy, ``reason`` ``<check>IsNotHealthy`` (``<check>IsHealthy`` when it clears,
  status ``False``), and ``message`` one entry per fault, each ended by ``;``:
  ``ErrorCode:<code> <EntityType>:<EntityValue> … <text> Recommended Action=<action>;``. For an XID the code is
  the XID number (``79``; ``145.<subcode>`` for the NVLink5 XIDs 144–150), the entities ``PCI:<address>`` and
  ``GPU:<uuid>`` (``GPU_UUID``/``GPUID`` in other monitors), the action one of NVSentinel's ``RecommendedAction``
  names (``COMPONENT_RESET``, ``RESTART_BM``, ``CONTACT_SUPPORT``, …). Non-fatal events become Kubernetes
  Events, not conditions, and the agent does not read them.
- node-problem-detector style conditions from a DCGM or log plugin: a free-form ``type`` (``GPUProblem``), the
  XID in ``reason`` or ``message`` (``XidError48``, ``Xid 48``, ``NVRM: Xid (PCI:0000:3b:00): 48, …``) and a
  short description in ``message`` (``DBE``).

Level, highest authority first (as with MindCluster, a table fills in a level the reporter did not give, it never
overrides one the reporter gave): the reporter's own ``Recommended Action`` (:data:`ACTION_LEVEL`, most severe
of the entries), else the XID's resolution bucket in NVIDIA's XID catalogue as NVSentinel classifies it
(:data:`XID_BUCKETS`, :data:`BUCKET_LEVEL`), else the check's own level (:data:`CHECK_LEVEL`), else
``SeparateNPU`` (an unknown GPU fault takes the hardware out, as MindCluster does with an unknown chip code).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.core.faults import FaultLevel

# --- NVIDIA's XID catalogue as NVSentinel reads it -----------------------------------------------------------


def _span(first: int, last: int) -> tuple[int, ...]:
    return tuple(range(first, last + 1))


XID_BUCKETS: Mapping[str, frozenset[int]] = {
    "UNEXPECTED_ERR_REPORT_ISSUE": frozenset(
        (
            *(*_span(1, 7), 9, 10, 12, *_span(15, 24), *_span(26, 30), *_span(33, 36), 42, 47, *_span(49, 53)),
            *(*_span(55, 59), 61, 65, 73, 81, 87, 90, 91, 108, *_span(111, 118), *_span(122, 125), 138, 142),
        )
    ),
    "RESTART_APP": frozenset(
        (
            *(8, 11, 13, 25, 31, 32, 39, 40, 41, 60, *_span(68, 72), 75, 76, 77, 80, *_span(82, 86), 88, 89, 94),
            *(*_span(96, 105), *_span(126, 135), 139),
        )
    ),
    "IGNORE": frozenset((14, 37, 38, 43, 44, 63, 66, 67, 92, 93, 106, 107, 121, 137, 141, 152, 153, 157, 161)),
    "WORKFLOW_XID_45": frozenset((45,)),
    "WORKFLOW_XID_48": frozenset((48,)),
    "RESET_GPU": frozenset((46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158, 162)),
    "CHECK_MECHANICALS": frozenset((54,)),
    "WORKFLOW_NVLINK_ERR": frozenset((74,)),
    "UPDATE_SWFW": frozenset((78,)),
    "RESTART_BM": frozenset((79, 160)),
    "WORKFLOW_NVLINK5_ERR": frozenset(_span(144, 150)),
    "RESTART_VM": frozenset((151,)),
    "XID_154_EVAL": frozenset((154,)),
    "CHECK_UVM": frozenset((159,)),
}
"""XID → the catalogue's resolution bucket ("immediate action"), as NVSentinel ships it
(``distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv``; its syslog monitor reads the same
buckets from NVIDIA's ``Xid-Catalog.xlsx``). XIDs 1–162."""

_BUCKET_OF: dict[int, str] = {xid: bucket for bucket, xids in XID_BUCKETS.items() for xid in xids}

BUCKET_LEVEL: Mapping[str, FaultLevel] = {
    # the GPU is fine, the application failed: restart the job (NVSentinel: action NONE, non-fatal)
    "RESTART_APP": FaultLevel.RESTART_BUSINESS,
    "XID_154_EVAL": FaultLevel.RESTART_BUSINESS,  # NVSentinel: equivalent to RESTART_APP
    "CHECK_UVM": FaultLevel.RESTART_BUSINESS,  # non-fatal in the catalogue
    "IGNORE": FaultLevel.NOT_HANDLE,
    # XID 45 is the driver cleaning up after a process was killed (often by the restart of the job itself): a
    # consequence, never a reason to restart again. NVSentinel's own example rule set excludes it from quarantine.
    "WORKFLOW_XID_45": FaultLevel.NOT_HANDLE,
    # the GPU must be reset (NVSentinel COMPONENT_RESET): the job leaves the GPU, the node is not quarantined
    "RESET_GPU": FaultLevel.RESTART_NPU,
    "WORKFLOW_XID_48": FaultLevel.RESTART_NPU,
    # the node must be rebooted: jobs move off and the node is out until it is
    "RESTART_BM": FaultLevel.SEPARATE,
    "RESTART_VM": FaultLevel.SEPARATE,
    # NVSentinel CONTACT_SUPPORT (fatal, cordoned): a person looks at the hardware
    "UNEXPECTED_ERR_REPORT_ISSUE": FaultLevel.SEPARATE,
    "CHECK_MECHANICALS": FaultLevel.SEPARATE,
    "UPDATE_SWFW": FaultLevel.SEPARATE,
    "WORKFLOW_NVLINK_ERR": FaultLevel.SEPARATE,
    "WORKFLOW_NVLINK5_ERR": FaultLevel.SEPARATE,
}
"""Resolution bucket → the agent's fault level (the reasoning is in docs/nvsentinel.md)."""

ACTION_LEVEL: Mapping[str, FaultLevel] = {
    "NONE": FaultLevel.NOT_HANDLE,
    "COMPONENT_RESET": FaultLevel.RESTART_NPU,
    "RESTART_VM": FaultLevel.SEPARATE,
    "RESTART_BM": FaultLevel.SEPARATE,
    "REPLACE_VM": FaultLevel.SEPARATE,
    "CONTACT_SUPPORT": FaultLevel.SEPARATE,
    "UNKNOWN": FaultLevel.SEPARATE,
}
"""NVSentinel's ``RecommendedAction`` (``data-models/protobufs/health_event.proto``) → the agent's level. An action
not listed is ``SeparateNPU``."""

NVSENTINEL_CHECKS: tuple[str, ...] = (
    "SysLogsXIDError",
    "SysLogsSXIDError",
    "SysLogsGPUFallenOff",
    "GpuInforomWatch",
    "GpuMemWatch",
    "GpuPcieWatch",
    "GpuNvlinkWatch",
    "GpuNvLinkWatch",
    "GpuDriverWatch",
    "GpuThermalWatch",
    "GpuPowerWatch",
    "GpuNvSwitchFatalWatch",
)
"""NVSentinel's GPU health checks, which are the types of the node conditions it writes (syslog-health-monitor
``pkg/syslog-monitor`` check names; gpu-health-monitor's DCGM health watches)."""

GPU_CONDITION_TYPES: tuple[str, ...] = (*NVSENTINEL_CHECKS, "GPUProblem")
"""Condition types read as GPU faults whatever their text says; ``GPUProblem`` is the usual name of a
node-problem-detector custom plugin's GPU condition."""

CHECK_LEVEL: Mapping[str, FaultLevel] = {"SysLogsGPUFallenOff": FaultLevel.SEPARATE}
"""A check's level when its entries name no action and no XID (a GPU off the bus needs the node rebooted)."""

UNKNOWN_LEVEL = FaultLevel.SEPARATE
"""A GPU fault nothing above classifies."""

MAX_DETAIL = 512
"""Characters of the condition's reason and message kept for events and logs."""
MAX_DEVICES = 16

# --- parsing ---------------------------------------------------------------------------------------------------

_ACTION = re.compile(r"Recommended Action=([A-Z_]+)")
_ERROR_CODE = re.compile(r"ErrorCode:(\S+)")
_XID = re.compile(r"\bxid(?:[\s_-]*error)?[\s_:=#-]*(\d{1,3})(?![\d.])", re.IGNORECASE)
_NVRM_XID = re.compile(r"Xid \(PCI:([^)\s]+)\): (\d{1,3})")
_ENTITY = re.compile(r"\b(PCI|GPU|GPU_UUID|GPUID|NVSWITCH):([^\s);,]+)")
_GPU_UUID = re.compile(r"\bGPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b")
_NUMERIC = re.compile(r"(\d{1,6})(?:\.\S*)?")


@dataclass(frozen=True, slots=True)
class GpuReading:
    """What a GPU condition says.

    Attributes:
        level: the agent's level (module docstring for the order of authority).
        codes: the vendor's fault identities, in the order first seen: ``XID-<n>`` for an XID (``XID-145.<sub>``
            for an NVLink5 one), ``SXID-<n>`` for an NVSwitch SXID, DCGM codes (``DCGM_FR_…``) as written.
        devices: the GPUs or links named, ``<EntityType>:<value>`` as NVSentinel writes them (``PCI:0000:3b:00``,
            ``GPU:GPU-8f3c…``); a bare GPU UUID found in free text as ``GPU:<uuid>``.
        actions: NVSentinel's recommended actions named in the message (``COMPONENT_RESET``, …).
        detail: ``<reason>: <message>`` cut to :data:`MAX_DETAIL` characters (the reporter's words, for people).
    """

    level: FaultLevel
    codes: tuple[str, ...]
    devices: tuple[str, ...]
    actions: tuple[str, ...]
    detail: str


def xid_level(xid: int) -> FaultLevel:
    """The agent's level for XID `xid` by its resolution bucket; an XID not in the catalogue is ``SeparateNPU``."""
    bucket = _BUCKET_OF.get(xid)
    return BUCKET_LEVEL.get(bucket, UNKNOWN_LEVEL) if bucket is not None else UNKNOWN_LEVEL


def xid_bucket(xid: int) -> str | None:
    """The catalogue's resolution bucket of `xid` (None: not in it)."""
    return _BUCKET_OF.get(xid)


def action_level(action: str) -> FaultLevel:
    """The agent's level for NVSentinel's recommended action `action` (unknown: ``SeparateNPU``)."""
    return ACTION_LEVEL.get(action, UNKNOWN_LEVEL)


def is_gpu_condition(type_: str, reason: str, message: str) -> bool:
    """Whether a True node condition is a GPU fault: a known GPU type, or an XID or an NVSentinel recommended
    action in its reason or message."""
    if type_ in GPU_CONDITION_TYPES:
        return True
    text = f"{reason} {message}"
    return bool(_XID.search(text) or _NVRM_XID.search(text) or _ACTION.search(text))


def _add(seen: list[str], item: str) -> None:
    if item not in seen:
        seen.append(item)


def read_gpu_condition(type_: str, reason: str, message: str) -> GpuReading:
    """Read one True GPU condition (see the module docstring for its shapes). Never raises; text it cannot read
    leaves the level at the check's or ``SeparateNPU``."""
    codes: list[str] = []
    devices: list[str] = []
    actions: list[str] = []
    xids: list[int] = []
    sxid = type_ == "SysLogsSXIDError"
    for entry in (message or "").split(";"):
        for m in _ACTION.finditer(entry):
            _add(actions, m.group(1))
        for m in _ERROR_CODE.finditer(entry):
            code = m.group(1)
            num = _NUMERIC.fullmatch(code)
            if num is not None:
                _add(codes, f"{'SXID' if sxid else 'XID'}-{code}")
                if not sxid:
                    xids.append(int(num.group(1)))
            elif code.upper().startswith("XID-") and code[4:].isdigit():
                _add(codes, code.upper())
                xids.append(int(code[4:]))
            else:
                _add(codes, code)
        for m in _ENTITY.finditer(entry):
            _add(devices, f"{m.group(1)}:{m.group(2)}")
    text = f"{reason} {message}"
    for m in _NVRM_XID.finditer(text):
        _add(devices, f"PCI:{m.group(1)}")
        if not sxid:
            _add(codes, f"XID-{m.group(2)}")
            xids.append(int(m.group(2)))
    if not sxid:
        for m in _XID.finditer(text):
            _add(codes, f"XID-{m.group(1)}")
            xids.append(int(m.group(1)))
    known = {d.split(":", 1)[1] for d in devices}
    for m in _GPU_UUID.finditer(text):
        if m.group(0) not in known:
            _add(devices, f"GPU:{m.group(0)}")
    if actions:
        level = max(action_level(a) for a in actions)
    elif xids:
        level = max(xid_level(x) for x in xids)
    else:
        level = CHECK_LEVEL.get(type_, UNKNOWN_LEVEL)
    detail = f"{reason}: {message}" if reason and message else (reason or message or "")
    return GpuReading(level, tuple(codes), tuple(devices[:MAX_DEVICES]), tuple(actions), detail[:MAX_DETAIL])


# --- NVSentinel's node marks -----------------------------------------------------------------------------------

NVSENTINEL_STATE_LABEL = "dgxc.nvidia.com/nvsentinel-state"
"""Node label NVSentinel's fault-quarantine, node-drainer and fault-remediation move through ``quarantined``,
``draining``, ``drain-succeeded``/``drain-failed``, ``remediating``, ``remediation-succeeded``/``-failed``; absent on
a node it does not hold (``commons/pkg/statemanager/statemanager.go``)."""
NVSENTINEL_CORDON_BY_LABELS = ("k8saas.nvidia.com/cordon-by", "k8s.nvidia.com/cordon-by")
"""fault-quarantine's ``<labelPrefix>cordon-by`` label (value ``NVSentinel``) under its two prefixes in use."""
NVSENTINEL_QUARANTINE_ANNOTATIONS = ("quarantineHealthEventIsCordoned",)
"""fault-quarantine's node annotation (value ``True``) while it holds the node cordoned
(``fault-quarantine/pkg/common/common.go``; its sibling ``quarantineHealthEvent`` holds the whole health event and is
not kept: the state label says the same)."""
NVSENTINEL_LABEL_KEYS = (NVSENTINEL_STATE_LABEL, *NVSENTINEL_CORDON_BY_LABELS)


def nvsentinel_mark(labels: Iterable[tuple[str, str]], annotations: Iterable[tuple[str, str]]) -> str:
    """How NVSentinel shows that it holds a node (quarantined, cordoned, draining or remediating it), as
    ``key=value`` for a log line; "" when it does not. Pure.

    Read from the node's labels and annotations: the state label (any value but ``remediation-succeeded``, which
    NVSentinel leaves only until the node is healthy again), a ``cordon-by=NVSentinel`` label, or
    fault-quarantine's ``quarantineHealthEventIsCordoned=True``."""
    for key, value in labels:
        if key == NVSENTINEL_STATE_LABEL and value and value != "remediation-succeeded":
            return f"{key}={value}"
        if key in NVSENTINEL_CORDON_BY_LABELS and value == "NVSentinel":
            return f"{key}={value}"
    for key, value in annotations:
        if key in NVSENTINEL_QUARANTINE_ANNOTATIONS and value == "True":
            return f"{key}={value}"
    return ""
