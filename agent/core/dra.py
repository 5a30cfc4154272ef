"""Dynamic Resource Allocation (``resource.k8s.io/v1``): which pod holds which device. Pure: no I/O, no clock.

A DRA driver publishes its devices in ResourceSlices (one pool per node for node-local devices: driver, pool, node,
each device's name and typed attributes such as an NVIDIA GPU's ``uuid`` and ``pcieBusID`` or an Ascend NPU's
``physicId``); the scheduler allocates devices to a ResourceClaim (``status.allocation.devices.results[]``: driver,
pool, device) and reserves the claim for the pods that use it (``status.reservedFor[]``). This module joins the
two: a fault's :class:`~agent.core.devices.DeviceRef` → the slice device → the claims that hold it → the pods
reserving those claims (:meth:`DeviceAllocations.pods_holding`). agent.core.correlate then maps pods to jobs.

Only the newest generation of each (driver, pool) counts (the ResourceSlice API's rule for a pool that is being
republished). A result with ``adminAccess: true`` (a monitoring claim that may see a device in use by others) does
not hold the device.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent.core.devices import DeviceRef, normalise_pci

UUID_ATTRIBUTES = frozenset({"uuid"})
"""Attribute names (the part after a ``domain/`` prefix, lower case) holding a device UUID: NVIDIA's DRA driver
publishes ``uuid`` (``GPU-…``, ``MIG-…``)."""
PCI_ATTRIBUTES = frozenset({"pciebusid", "pcibusid"})
"""Attribute names (as above) holding a PCI address: NVIDIA's ``pcieBusID`` and the standard
``resource.kubernetes.io/pciBusID``."""
INDEX_ATTRIBUTES = frozenset({"physicid"})
"""Attribute names (as above) holding an NPU's index on its node, which its chip name ends with: MindCluster's
``physicId`` (``component/ascend-dynamic-resource-allocation/internal/device/generation_common.go``). NVIDIA's
``index`` is not read: GPU faults name a UUID or PCI address, and a bare index would match a GPU for an NPU's
chip name on a node with both."""

DeviceKey = tuple[str, str, str]
"""(driver, pool, device name): a device as a ResourceClaim's allocation result names it."""
PodKey = tuple[str, str, str]
"""(namespace, name, uid) of a pod as a claim's ``reservedFor`` names it (uid "" when the entry has none)."""


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One device of a ResourceSlice.

    Attributes:
        name: ``spec.devices[].name`` (a DNS label, unique in its pool).
        node: the node it is on: the device's own ``nodeName`` or the slice's ``spec.nodeName``; "" when the device
            is reachable from several nodes (``allNodes``, a node selector).
        attributes: ``spec.devices[].attributes`` as (qualified name, value as text) pairs, sorted by name; ints
            in decimal, booleans ``true``/``false``.
    """

    name: str
    node: str
    attributes: tuple[tuple[str, str], ...] = ()

    def attribute(self, names: frozenset[str]) -> str:
        """The value of the first attribute whose unqualified name (lower case) is in `names`; "" when none."""
        for key, value in self.attributes:
            if key.rsplit("/", 1)[-1].lower() in names:
                return value
        return ""


@dataclass(frozen=True, slots=True)
class ResourceSliceRecord:
    """One ResourceSlice, slimmed (``resource.k8s.io/v1``).

    Attributes:
        driver: ``spec.driver`` (``gpu.nvidia.com``, ``npu.huawei.com``).
        pool: ``spec.pool.name`` (a node's name for node-local drivers).
        pool_generation: ``spec.pool.generation``; slices of an older generation than the pool's newest are ignored.
        node: ``spec.nodeName`` ("" for a slice of devices not local to one node).
        devices: its devices.
    """

    name: str
    uid: str
    resource_version: str
    driver: str
    pool: str
    pool_generation: int
    node: str
    devices: tuple[SliceDevice, ...]


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One ``status.allocation.devices.results[]`` entry of a ResourceClaim; admin_access: ``adminAccess`` true."""

    driver: str
    pool: str
    device: str
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class ResourceClaimRecord:
    """One ResourceClaim, slimmed (``resource.k8s.io/v1``).

    Attributes:
        devices: the allocation's results (empty while not allocated).
        reserved_for: the pods in ``status.reservedFor[]`` as (name, uid); other consumer kinds are dropped.
    """

    namespace: str
    name: str
    uid: str
    resource_version: str
    devices: tuple[AllocatedDevice, ...]
    reserved_for: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Holding:
    """What :meth:`DeviceAllocations.pods_holding` found for a fault's devices.

    Attributes:
        pods: the pods that hold a named device through a claim (:data:`PodKey`).
        unresolved: the refs no ResourceSlice publishes (the caller correlates them without DRA).
    """

    pods: frozenset[PodKey]
    unresolved: tuple[DeviceRef, ...]


class DeviceAllocations:
    """The join of ResourceSlices and ResourceClaims: device identity → device → holding pods.

    Built from whole stores (a few thousand devices at most; the state rebuilds it only after a slice or claim
    changed). Immutable after construction.
    """

    __slots__ = ("_devices_by_node", "_holders", "_vendor_index")

    def __init__(self, slices: Iterable[ResourceSliceRecord], claims: Iterable[ResourceClaimRecord]) -> None:
        newest: dict[tuple[str, str], int] = {}
        slice_list = list(slices)
        for s in slice_list:
            pool = (s.driver, s.pool)
            newest[pool] = max(newest.get(pool, s.pool_generation), s.pool_generation)
        self._devices_by_node: dict[str, list[tuple[DeviceKey, SliceDevice]]] = {}
        self._vendor_index: dict[tuple[str, str], list[tuple[DeviceKey, SliceDevice]]] = {}
        for s in slice_list:
            if s.pool_generation < newest[(s.driver, s.pool)]:
                continue
            for d in s.devices:
                entry = ((s.driver, s.pool, d.name), d)
                self._devices_by_node.setdefault(d.node, []).append(entry)
                uuid = d.attribute(UUID_ATTRIBUTES).lower()
                if uuid:
                    self._vendor_index.setdefault(("uuid", uuid), []).append(entry)
                pci = normalise_pci(d.attribute(PCI_ATTRIBUTES))
                if pci:
                    self._vendor_index.setdefault(("pci", pci), []).append(entry)
        self._holders: dict[DeviceKey, set[PodKey]] = {}
        for c in claims:
            for a in c.devices:
                if a.admin_access:
                    continue
                held = self._holders.setdefault((a.driver, a.pool, a.device), set())
                held.update((c.namespace, pod, uid) for pod, uid in c.reserved_for)

    def resolve(self, ref: DeviceRef) -> list[DeviceKey]:
        """The published devices `ref` names (usually one; [] when no slice publishes it).

        A UUID or PCI address matches the device attribute of that kind (``uuid``; ``pcieBusID``/``pciBusID``) on
        the ref's node (any node when the device's or the ref's node is unknown); a name matches a device name
        on the ref's node, case-insensitively; a chip index, where no name matched, an index attribute
        (``physicId``) there. `ref.driver`, when given, must be the slice's driver.
        """
        found: list[DeviceKey] = []
        if ref.uuid or ref.pci_bus_id:
            key = ("uuid", ref.uuid.lower()) if ref.uuid else ("pci", normalise_pci(ref.pci_bus_id))
            for dk, d in self._vendor_index.get(key, ()):
                if (not ref.node or not d.node or d.node == ref.node) and ref.driver in (None, dk[0]):
                    found.append(dk)
            return found
        candidates = [e for e in self._devices_by_node.get(ref.node, ()) if ref.driver in (None, e[0][0])]
        if ref.name:
            wanted = ref.name.lower()
            found = [dk for dk, d in candidates if d.name.lower() == wanted]
        if not found and ref.chip_index is not None:
            index = str(ref.chip_index)
            found = [dk for dk, d in candidates if d.attribute(INDEX_ATTRIBUTES) == index]
        return found

    @staticmethod
    def holds(pods: frozenset[PodKey], namespace: str, name: str, uid: str) -> bool:
        """Whether the pod (namespace, name, uid) is among `pods`: by UID where both sides know it, so a pod
        re-created under the same name is not taken for the one an old claim was reserved for."""
        return (
            (namespace, name, uid) in pods
            or (namespace, name, "") in pods
            or (not uid and any(p[0] == namespace and p[1] == name for p in pods))
        )

    def pods_holding(self, refs: Iterable[DeviceRef]) -> Holding:
        """The pods that hold any of `refs` through a ResourceClaim, and the refs no slice publishes."""
        pods: set[PodKey] = set()
        unresolved: list[DeviceRef] = []
        for ref in refs:
            devices = self.resolve(ref)
            if not devices:
                unresolved.append(ref)
            for dk in devices:
                pods.update(self._holders.get(dk, ()))
        return Holding(frozenset(pods), tuple(unresolved))

    def __bool__(self) -> bool:
        """False when no slice publishes any device (no DRA in use: correlation as without it)."""
        return bool(self._devices_by_node)


NO_ALLOCATIONS = DeviceAllocations((), ())
"""The empty join (DRA not watched)."""
