"""Device identities: which accelerator a fault names, in the words its reporter used. Pure: no I/O.

A chip fault names its device the way the reporting component spells it:

- an Ascend NPU by its device-plugin / DRA device name, ``Ascend910-3`` or ``npu-3`` (MindCluster's device plugin
  ConfigMap; MindCluster's DRA driver names its devices the same way, ``<released name>-<physical id>``,
  ``component/ascend-dynamic-resource-allocation/internal/device/generation_910.go`` ``buildNpuDevice``);
- an NVIDIA GPU by its UUID, ``GPU-<uuid>`` or ``MIG-<uuid>`` (what NVML, DCGM, NVSentinel's health events and
  the NVIDIA device plugin use as the device id);
- any PCI device by its PCI bus id, ``0000:3b:00.0`` (nvidia-smi and NVML write an 8-digit domain,
  ``00000000:3B:00.0``; both are read as the same address).

:class:`DeviceRef` is the one interface a fault source and the DRA correlation (agent.core.dra) share: a source
that knows more than a spelling (a driver, an index) builds it directly; :func:`device_refs` reads the refs of a
:class:`~agent.core.faults.Fault` from its ``node`` and ``chips``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.core.faults import Fault, FaultKind

_PCI = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})(?:\.(?P<fn>[0-7]))?$"
)
UUID_ENTITIES = frozenset({"GPU", "GPU_UUID", "GPUID"})
"""Entity types of a ``<type>:<value>`` device entry (:attr:`agent.core.faults.Fault.devices`) that name a GPU by UUID
(NVSentinel's health monitors use all three)."""
PCI_ENTITIES = frozenset({"PCI"})
"""Entity types of a device entry that name a PCI address."""
_UUID = re.compile(r"^(?:gpu|mig)-(?:gpu-)?[0-9a-f]{8}-[0-9a-f]{4}-", re.IGNORECASE)
_INDEX = re.compile(r"-([0-9]{1,6})$")


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """One accelerator a fault names.

    Attributes:
        node: the node's name ("" when the identity is cluster-unique and the node unknown).
        driver: the DRA driver name that publishes it (``gpu.nvidia.com``, ``npu.huawei.com``), None when unknown.
        uuid: a device UUID as NVML spells it (``GPU-…``, ``MIG-…``), lower case; "" when not given.
        pci_bus_id: a PCI address normalised by :func:`normalise_pci` (``0000:3b:00.0``); "" when not given.
        name: the device's name on its node (``Ascend910-3``, ``gpu-3``); "" when not given.
        chip_index: the device's index on its node (an NPU's physical id, a GPU's NVML index); None when not given.

    At least one of uuid, pci_bus_id, name, chip_index is set.
    """

    node: str
    driver: str | None = None
    uuid: str = ""
    pci_bus_id: str = ""
    name: str = ""
    chip_index: int | None = None

    @property
    def vendor_scoped(self) -> bool:
        """True when the identity says which physical device it is without any pod annotation (a UUID or a PCI
        address): where no DRA allocation names it, only the node is known (a device plugin's assignment is not
        visible to the agent)."""
        return bool(self.uuid or self.pci_bus_id)


def normalise_pci(text: str) -> str:
    """A PCI address as ``dddd:bb:dd.f`` in lower case: an 8-digit domain keeps its last 4 digits, a missing
    domain is ``0000``, a missing function ``0`` (NVRM's Xid lines and NVSentinel write ``0000:3b:00``: a GPU is
    function 0). "" when `text` is not a PCI address."""
    m = _PCI.match(text.strip())
    if m is None:
        return ""
    domain = (m["domain"] or "0000")[-4:]
    return f"{domain}:{m['bus']}:{m['dev']}.{m['fn'] or '0'}".lower()


def parse_device(node: str, text: str, driver: str | None = None) -> DeviceRef:
    """Read one chip spelling (a fault's ``chips`` entry) into a :class:`DeviceRef` on `node`.

    ``GPU-<uuid>``/``MIG-<uuid>`` (and the older ``MIG-GPU-<uuid>/…``) → uuid; a PCI address → pci_bus_id;
    anything else → name (an NPU's ``Ascend910-3``), with chip_index its trailing ``-<n>`` (the physical id in
    MindCluster's spelling) when it has one.
    """
    lowered = text.strip().lower()
    if _UUID.match(lowered):
        return DeviceRef(node=node, driver=driver, uuid=lowered)
    pci = normalise_pci(text)
    if pci:
        return DeviceRef(node=node, driver=driver, pci_bus_id=pci)
    name = text.strip()
    index = _INDEX.search(name)
    return DeviceRef(node=node, driver=driver, name=name, chip_index=int(index[1]) if index else None)


def parse_entry(node: str, entry: str) -> DeviceRef | None:
    """Read one ``<type>:<value>`` device entry (:attr:`agent.core.faults.Fault.devices`): a GPU UUID
    (:data:`UUID_ENTITIES`) or a PCI address (:data:`PCI_ENTITIES`) on `node`; None for another type (an NVLink,
    an NVSwitch) or a value that is not one."""
    kind, _, value = entry.partition(":")
    kind = kind.strip().upper()
    if kind in UUID_ENTITIES and _UUID.match(value.strip()):
        return DeviceRef(node=node, uuid=value.strip().lower())
    if kind in PCI_ENTITIES and normalise_pci(value):
        return DeviceRef(node=node, pci_bus_id=normalise_pci(value))
    return None


def device_refs(fault: Fault) -> tuple[DeviceRef, ...]:
    """The devices a fault names, on ``fault.node``: for a chip or network fault one per ``fault.chips`` entry, and
    for any fault each readable ``fault.devices`` entry (:func:`parse_entry`), duplicates dropped; () when it names
    none (a node-wide fault of NodeD, NotReady)."""
    refs: list[DeviceRef] = []
    if fault.kind in (FaultKind.CHIP, FaultKind.NETWORK):
        refs += (parse_device(fault.node, chip) for chip in fault.chips if chip.strip())
    for entry in fault.devices:
        ref = parse_entry(fault.node, entry)
        if ref is not None:
            refs.append(ref)
    return tuple(dict.fromkeys(refs))
