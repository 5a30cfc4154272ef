"""DRA correlation: device identity → ResourceSlice device → ResourceClaim → pods → job (agent/core/devices.py,
agent/core/dra.py, the hook in agent/core/correlate.py) and the ResourceSlice/ResourceClaim converters
(agent/sources/dra.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from support import factories

from agent.core.cluster import FaultScheduling, JobKind, JobRecord, JobRef, PodRecord
from agent.core.correlate import JobKey, correlate, job_key, pods_hit
from agent.core.devices import DeviceRef, device_refs, normalise_pci, parse_device, parse_entry
from agent.core.dra import (
    AllocatedDevice,
    DeviceAllocations,
    ResourceClaimRecord,
    ResourceSliceRecord,
    SliceDevice,
)
from agent.core.faults import Fault, FaultKind, Rejection
from agent.settings import KubeSettings
from agent.sources.dra import convert_resource_claim, convert_resource_slice
from agent.sources.watchers import dra_watched, resources

T0 = datetime(2025, 1, 1, tzinfo=UTC)
GPU = "gpu.nvidia.com"
NPU = "npu.huawei.com"
UUIDS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}" for i in range(4)]


def _gpu(i: int, node: str = "n1") -> SliceDevice:
    return SliceDevice(
        name=f"gpu-{i}",
        node=node,
        attributes=((f"{GPU}/pcieBusID", f"0000:{0x3B + i:02x}:00.0"), ("index", str(i)), ("uuid", UUIDS[i])),
    )


def _slice(node: str, driver: str = GPU, generation: int = 1, devices: tuple[SliceDevice, ...] = ()) -> Any:
    return ResourceSliceRecord(
        name=f"{node}-{driver}-{generation}",
        uid="u",
        resource_version="1",
        driver=driver,
        pool=node,
        pool_generation=generation,
        node=node,
        devices=devices or tuple(_gpu(i, node) for i in range(4)),
    )


def _claim(name: str, pod: str, *devices: str, driver: str = GPU, pool: str = "n1", admin: bool = False) -> Any:
    return ResourceClaimRecord(
        namespace="ns",
        name=name,
        uid=f"uid-{name}",
        resource_version="1",
        devices=tuple(AllocatedDevice(driver, pool, d, admin) for d in devices),
        reserved_for=((pod, f"uid-{pod}"),),
    )


def _pod(name: str, job: str, node: str = "n1", chips: tuple[str, ...] = ()) -> PodRecord:
    link = JobRef(kind=JobKind.VOLCANO, namespace="ns", name=job, uid="")
    return factories.pod(name, node=node, phase="Running", ready=True, job=link, chips=chips, rank=None, created_at=T0)


def _job(name: str) -> JobRecord:
    return factories.job(name, labels=(), fault_scheduling=FaultScheduling.FORCE, min_available=None, created_at=T0)


def _fault(*chips: str, node: str = "n1", kind: FaultKind = FaultKind.CHIP) -> Fault:
    return factories.fault(kind=kind, node=node, chips=chips, at=T0)


PODS = (_pod("a-0", "a"), _pod("b-0", "b"), _pod("c-0", "c", node="n2"))
JOBS: dict[JobKey, JobRecord] = {job_key(j): j for j in (_job("a"), _job("b"), _job("c"))}
ALLOC = DeviceAllocations(
    (_slice("n1"), _slice("n2")),
    (
        _claim("a-gpus", "a-0", "gpu-0", "gpu-1"),
        _claim("b-gpus", "b-0", "gpu-2", "gpu-3"),
        _claim("c-gpus", "c-0", "gpu-3", pool="n2"),
    ),
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0000:3b:00.0", "0000:3b:00.0", id="canonical"),
        pytest.param("00000000:3B:00.0", "0000:3b:00.0", id="nvidia-smi-8-digit-domain"),
        pytest.param("3b:00.1", "0000:3b:00.1", id="no-domain"),
        pytest.param("Ascend910-3", "", id="not-pci"),
        pytest.param("0000:3b:00.9", "", id="function-out-of-range"),
        pytest.param("0000:3b:00", "0000:3b:00.0", id="no-function-is-0"),
    ],
)
def test_normalise_pci(text: str, expected: str) -> None:
    assert normalise_pci(text) == expected


@pytest.mark.parametrize(
    ("chip", "expected"),
    [
        pytest.param(UUIDS[1].upper(), DeviceRef("n1", uuid=UUIDS[1].lower()), id="gpu-uuid"),
        pytest.param("MIG-" + UUIDS[1][4:], DeviceRef("n1", uuid="mig-" + UUIDS[1][4:].lower()), id="mig-uuid"),
        pytest.param("gpu-2", DeviceRef("n1", name="gpu-2", chip_index=2), id="dra-device-name-not-uuid"),
        pytest.param("00000000:3B:00.0", DeviceRef("n1", pci_bus_id="0000:3b:00.0"), id="pci"),
        pytest.param("Ascend910-3", DeviceRef("n1", name="Ascend910-3", chip_index=3), id="npu-name"),
        pytest.param("weird", DeviceRef("n1", name="weird"), id="name-without-index"),
    ],
)
def test_parse_device(chip: str, expected: DeviceRef) -> None:
    assert parse_device("n1", chip) == expected


def test_device_refs_only_for_chip_and_network_faults() -> None:
    assert device_refs(_fault(UUIDS[0], kind=FaultKind.NODE)) == ()
    assert device_refs(_fault(UUIDS[0], kind=FaultKind.NETWORK)) == (DeviceRef("n1", uuid=UUIDS[0].lower()),)


@pytest.mark.parametrize(
    ("chips", "node", "expected"),
    [
        pytest.param((UUIDS[1],), "n1", {"a-0"}, id="uuid-of-a"),
        pytest.param((UUIDS[2].lower(),), "n1", {"b-0"}, id="uuid-case-insensitive"),
        pytest.param(("00000000:3E:00.0",), "n1", {"b-0"}, id="pci-of-b-gpu3"),
        pytest.param((UUIDS[3],), "n2", {"c-0"}, id="same-uuid-other-node"),
        pytest.param((UUIDS[0], UUIDS[3]), "n1", {"a-0", "b-0"}, id="two-gpus-two-jobs"),
        pytest.param(("gpu-2",), "n1", {"b-0"}, id="device-name"),
    ],
)
def test_dra_fault_hits_only_the_claim_holder(chips: tuple[str, ...], node: str, expected: set[str]) -> None:
    assert {p.name for p in pods_hit(_fault(*chips, node=node), PODS, ALLOC)} == expected


def test_dra_correlation_restarts_only_the_job_on_that_gpu() -> None:
    got = correlate(_fault(UUIDS[2]), PODS, JOBS, ALLOC)
    assert [h.job.name for h in got.hits] == ["b"]
    assert [h.job.name for h in correlate(_fault(UUIDS[2]), PODS, JOBS).hits] == ["a", "b"]  # no DRA: per node


def test_published_but_unallocated_device_hits_nothing() -> None:
    alloc = DeviceAllocations((_slice("n1"),), (_claim("a-gpus", "a-0", "gpu-0"),))
    assert pods_hit(_fault(UUIDS[1]), PODS, alloc) == []


def test_gpu_no_slice_publishes_is_per_node() -> None:
    """A device plugin's GPU: which pod holds it is unknown, so every pod on the node is hit."""
    hit = pods_hit(_fault("GPU-99999999-0000-0000-0000-000000000000"), PODS, ALLOC)
    assert {p.name for p in hit} == {"a-0", "b-0"}
    assert {p.name for p in pods_hit(_fault(UUIDS[0]), PODS)} == {"a-0", "b-0"}  # no DRA at all


def test_npu_without_dra_keeps_the_annotation_rule() -> None:
    pods = (_pod("a-0", "a", chips=("Ascend910-0",)), _pod("b-0", "b", chips=("Ascend910-1",)))
    assert [p.name for p in pods_hit(_fault("Ascend910-1"), pods, ALLOC)] == ["b-0"]
    assert [p.name for p in pods_hit(_fault("Ascend910-1"), pods)] == ["b-0"]


def test_npu_through_mindcluster_dra_matches_name_or_physic_id() -> None:
    """MindCluster's DRA driver names devices ``<released name>-<physicId>`` and publishes ``physicId``; a device
    name must be a DNS label, so a slice may spell it lower case (or differently): the physical id still joins."""
    npus = tuple(
        SliceDevice(name=f"npu-{i}", node="n1", attributes=(("deviceType", "Ascend910B"), ("physicId", str(i))))
        for i in range(2)
    )
    alloc = DeviceAllocations(
        (_slice("n1", driver=NPU, devices=npus),),
        (_claim("a-npu", "a-0", "npu-0", driver=NPU), _claim("b-npu", "b-0", "npu-1", driver=NPU)),
    )
    assert [p.name for p in pods_hit(_fault("npu-1"), PODS, alloc)] == ["b-0"]
    assert [p.name for p in pods_hit(_fault("Ascend910-0"), PODS, alloc)] == ["a-0"]


def test_older_pool_generation_is_ignored() -> None:
    old = _slice("n1", generation=1)
    new = _slice("n1", generation=2, devices=(_gpu(0),))
    alloc = DeviceAllocations((old, new), (_claim("b-gpus", "b-0", "gpu-2"),))
    assert alloc.resolve(DeviceRef("n1", uuid=UUIDS[2].lower())) == []
    assert alloc.resolve(DeviceRef("n1", uuid=UUIDS[0].lower())) == [(GPU, "n1", "gpu-0")]


def test_admin_access_claim_does_not_hold_the_device() -> None:
    alloc = DeviceAllocations(
        (_slice("n1"),), (_claim("mon", "a-0", "gpu-1", admin=True), _claim("b-gpus", "b-0", "gpu-1"))
    )
    assert [p.name for p in pods_hit(_fault(UUIDS[1]), PODS, alloc)] == ["b-0"]


def test_driver_filter() -> None:
    assert ALLOC.resolve(DeviceRef("n1", driver=NPU, uuid=UUIDS[0].lower())) == []
    assert ALLOC.resolve(DeviceRef("n1", driver=GPU, uuid=UUIDS[0].lower())) == [(GPU, "n1", "gpu-0")]


def test_node_fault_unchanged_by_dra() -> None:
    assert {p.name for p in pods_hit(_fault(kind=FaultKind.NODE), PODS, ALLOC)} == {"a-0", "b-0"}


# ---- converters --------------------------------------------------------------------------------------------------

META = {"name": "x", "uid": "u1", "resourceVersion": "5"}


def test_convert_resource_slice() -> None:
    rec = convert_resource_slice(
        {
            "metadata": META,
            "spec": {
                "driver": GPU,
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 3, "resourceSliceCount": 1},
                "devices": [
                    {"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-A"}, "index": {"int": 0}}},
                    {"name": "gpu-1", "attributes": {"mig": {"bool": False}, "driverVersion": {"version": "1.2.3"}}},
                ],
            },
        }
    )
    assert isinstance(rec, ResourceSliceRecord)
    assert (rec.driver, rec.pool, rec.pool_generation, rec.node) == (GPU, "n1", 3, "n1")
    assert rec.devices[0] == SliceDevice("gpu-0", "n1", (("index", "0"), ("uuid", "GPU-A")))
    assert rec.devices[1].attributes == (("driverVersion", "1.2.3"), ("mig", "false"))


def test_convert_resource_claim_keeps_pods_only() -> None:
    rec = convert_resource_claim(
        {
            "metadata": {**META, "namespace": "ns"},
            "status": {
                "allocation": {
                    "devices": {"results": [{"request": "r", "driver": GPU, "pool": "n1", "device": "gpu-0"}]}
                },
                "reservedFor": [
                    {"resource": "pods", "name": "p", "uid": "pu"},
                    {"apiGroup": "example.com", "resource": "pods", "name": "q", "uid": "qu"},
                ],
            },
        }
    )
    assert isinstance(rec, ResourceClaimRecord)
    assert rec.devices == (AllocatedDevice(GPU, "n1", "gpu-0"),)
    assert rec.reserved_for == (("p", "pu"),)


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        pytest.param({"metadata": META, "spec": {"pool": {"name": "p"}}}, "missing-field", id="slice-no-driver"),
        pytest.param({"metadata": META, "spec": {"driver": "d", "pool": {"name": "p"}, "devices": [1]}}, "wrong-type",
                     id="slice-device-not-object"),
        pytest.param({"metadata": META, "spec": {"driver": "d", "pool": {"name": "p"},
                                                 "devices": [{"name": "a", "attributes": {"k": {"int": 1.5}}}]}},
                     "wrong-type", id="attribute-float"),
        pytest.param({"spec": {}}, "missing-metadata", id="slice-no-metadata"),
    ],
)  # fmt: skip
def test_bad_slice_is_rejected(obj: dict[str, Any], reason: str) -> None:
    rec = convert_resource_slice(obj)
    assert isinstance(rec, Rejection)
    assert rec.reason == reason


def test_bad_claim_is_rejected() -> None:
    bad = {
        "metadata": {**META, "namespace": "ns"},
        "status": {"allocation": {"devices": {"results": [{"driver": GPU}]}}},
    }
    rec = convert_resource_claim(bad)
    assert isinstance(rec, Rejection)
    assert rec.reason == "missing-field"


# ---- node-wide reports that name their GPUs (Fault.devices, NVSentinel's entities) -------------------------------


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        pytest.param(f"GPU:{UUIDS[2]}", DeviceRef("n1", uuid=UUIDS[2].lower()), id="gpu-uuid"),
        pytest.param(f"GPU_UUID:{UUIDS[2]}", DeviceRef("n1", uuid=UUIDS[2].lower()), id="gpu-uuid-entity"),
        pytest.param("PCI:0000:3b:00", DeviceRef("n1", pci_bus_id="0000:3b:00.0"), id="pci-without-function"),
        pytest.param("NVLINK:3", None, id="other-entity"),
        pytest.param("GPU:3", None, id="gpu-entity-not-a-uuid"),
    ],
)
def test_parse_entry(entry: str, expected: DeviceRef | None) -> None:
    assert parse_entry("n1", entry) == expected


def _node_fault(*entries: str) -> Fault:
    return Fault(**{**_fields(factories.fault(kind=FaultKind.NODE, node="n1", chips=(), at=T0)), "devices": entries})


def _fields(fault: Fault) -> dict[str, Any]:
    return {name: getattr(fault, name) for name in Fault.__dataclass_fields__}


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param((f"GPU:{UUIDS[2]}", "PCI:0000:3e:00"), {"b-0"}, id="gpu-2-and-3-of-b"),
        pytest.param(("PCI:0000:3b:00",), {"a-0"}, id="pci-of-a"),
        pytest.param(("GPU:GPU-99999999-0000-0000-0000-000000000000",), {"a-0", "b-0"}, id="unknown-gpu-per-node"),
        pytest.param((f"GPU:{UUIDS[2]}", "GPU:GPU-99999999-0000-0000-0000-000000000000"), {"a-0", "b-0"},
                     id="one-unknown-per-node"),
        pytest.param((), {"a-0", "b-0"}, id="names-no-device"),
        pytest.param(("NVLINK:3",), {"a-0", "b-0"}, id="names-no-gpu"),
    ],
)  # fmt: skip
def test_node_fault_naming_gpus_correlates_by_claim(entries: tuple[str, ...], expected: set[str]) -> None:
    fault = _node_fault(*entries)
    assert {p.name for p in pods_hit(fault, PODS, ALLOC)} == expected
    assert {p.name for p in pods_hit(fault, PODS)} == {"a-0", "b-0"}  # no DRA: per node, as before


def test_device_refs_of_a_chip_fault_with_devices_drop_duplicates() -> None:
    fault = factories.fault(kind=FaultKind.CHIP, node="n1", chips=(UUIDS[1],), at=T0)
    fault = Fault(**{**_fields(fault), "devices": (f"GPU:{UUIDS[1]}", "PCI:0000:3c:00.0")})
    assert device_refs(fault) == (DeviceRef("n1", uuid=UUIDS[1].lower()), DeviceRef("n1", pci_bus_id="0000:3c:00.0"))


# ---- which watches kube.dra asks for ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "served", "watched"),
    [
        pytest.param("auto", True, True, id="auto-served"),
        pytest.param("auto", False, False, id="auto-not-served"),
        pytest.param("auto", None, True, id="auto-not-looked"),
        pytest.param("on", False, True, id="on"),
        pytest.param("off", True, False, id="off"),
    ],
)
def test_dra_watches_follow_the_setting_and_the_api(setting: str, served: bool | None, watched: bool) -> None:
    settings = KubeSettings(namespaces=["a", "b"], dra=setting)  # type: ignore[arg-type]
    assert dra_watched(settings, served) is watched
    got = [(r.source, r.namespace) for r in resources(settings, dra_served=served) if r.group == "resource.k8s.io"]
    expected = [("resourceslices", None), ("resourceclaims", "a"), ("resourceclaims", "b")]
    assert got == (expected if watched else [])


def test_a_pod_recreated_under_the_same_name_is_not_the_old_claims_holder() -> None:
    """Volcano re-creates a restarted job's pods under the same names; until the old claim is released it still
    names the old pod's UID, which the new pod (on another device) must not inherit."""
    new_b = factories.pod(
        "b-0", node="n1", phase="Running", ready=True, job=PODS[1].job, chips=(), rank=None, created_at=T0, uid="u2"
    )
    alloc = DeviceAllocations((_slice("n1"),), (_claim("b-old", "b-0", "gpu-2"),))
    assert pods_hit(_fault(UUIDS[2]), (PODS[0], new_b), alloc) == []
    assert [p.name for p in pods_hit(_fault(UUIDS[2]), (PODS[0], PODS[1]), alloc)] == ["b-0"]
