"""ResourceSlices and ResourceClaims (``resource.k8s.io/v1``, GA in Kubernetes 1.34) → the slim records of
agent.core.dra.

Read fields (the ``resource.k8s.io/v1`` API types, k8s.io/api/resource/v1/types.go):

- ResourceSlice: ``spec.driver``, ``spec.pool.name``, ``spec.pool.generation``, ``spec.nodeName``, and per
  ``spec.devices[]`` its ``name``, ``nodeName`` (per-device node selection) and ``attributes`` (a map of qualified
  name → one of ``string``, ``int``, ``bool``, ``version``).
- ResourceClaim: ``status.allocation.devices.results[]`` (``driver``, ``pool``, ``device``, ``adminAccess``) and
  ``status.reservedFor[]`` (``resource: pods``, ``name``, ``uid``; other consumers are dropped).

Rejection reasons: ``missing-metadata``, ``wrong-type``, ``missing-field`` (a slice without driver or pool, an
allocation result without driver, pool or device).
"""

from __future__ import annotations

from typing import Any

import structlog
from kubernetes_asyncio import client as k8s

from agent.core.dra import AllocatedDevice, ResourceClaimRecord, ResourceSliceRecord, SliceDevice
from agent.core.faults import Rejection
from agent.kube.errors import KubeError, translated
from agent.sources.common import Bad, Metadata, get_dict, get_int, get_list, get_str, intern, object_ref

log = structlog.get_logger(__name__)

DRA_GROUP = "resource.k8s.io"
_VALUE_KINDS = ("string", "int", "bool", "version")


def _attribute_text(value: Any, where: str) -> str:
    """One DeviceAttribute (exactly one of string/int/bool/version) as text."""
    if not isinstance(value, dict):
        raise Bad("wrong-type", f"{where} is {type(value).__name__}, want object")
    for kind in _VALUE_KINDS:
        v = value.get(kind)
        if v is None:
            continue
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | str):
            return str(v)
        raise Bad("wrong-type", f"{where}.{kind} is {type(v).__name__}")
    return ""


def convert_resource_slice(obj: dict[str, Any]) -> ResourceSliceRecord | Rejection:
    """Convert one raw ResourceSlice. Never raises (see the module docstring for the rejection reasons)."""
    try:
        m = Metadata(obj, "ResourceSlice")
        spec = get_dict(obj, "spec", "resourceslice")
        driver = get_str(spec, "driver", "spec")
        pool = get_dict(spec, "pool", "spec")
        pool_name = get_str(pool, "name", "spec.pool")
        if not driver or not pool_name:
            raise Bad("missing-field", "spec.driver or spec.pool.name missing")
        node = get_str(spec, "nodeName", "spec")
        devices = []
        for d in get_list(spec, "devices", "spec"):
            if not isinstance(d, dict):
                raise Bad("wrong-type", "spec.devices[] is not an object")
            name = get_str(d, "name", "spec.devices[]")
            if not name:
                raise Bad("missing-field", "spec.devices[].name missing")
            attrs = get_dict(d, "attributes", f"spec.devices[{name}]")
            devices.append(
                SliceDevice(
                    name=intern(name),
                    node=intern(get_str(d, "nodeName", f"spec.devices[{name}]") or node),
                    attributes=tuple(
                        sorted(
                            (intern(k), _attribute_text(v, f"spec.devices[{name}].attributes[{k}]"))
                            for k, v in attrs.items()
                        )
                    ),
                )
            )
        return ResourceSliceRecord(
            name=m.name,
            uid=m.uid,
            resource_version=m.rv,
            driver=intern(driver),
            pool=intern(pool_name),
            pool_generation=get_int(pool, "generation", "spec.pool") or 0,
            node=intern(node),
            devices=tuple(devices),
        )
    except Bad as e:
        return Rejection(object_ref(obj, "ResourceSlice"), e.reason, e.detail)


def convert_resource_claim(obj: dict[str, Any]) -> ResourceClaimRecord | Rejection:
    """Convert one raw ResourceClaim. Never raises (see the module docstring for the rejection reasons)."""
    try:
        m = Metadata(obj, "ResourceClaim")
        status = get_dict(obj, "status", "resourceclaim")
        allocation = get_dict(status, "allocation", "status")
        results = get_list(get_dict(allocation, "devices", "status.allocation"), "results", "status.allocation.devices")
        devices = []
        for r in results:
            if not isinstance(r, dict):
                raise Bad("wrong-type", "status.allocation.devices.results[] is not an object")
            where = "status.allocation.devices.results[]"
            driver, pool, device = (get_str(r, k, where) for k in ("driver", "pool", "device"))
            if not driver or not pool or not device:
                raise Bad("missing-field", f"{where} without driver, pool or device")
            admin = r.get("adminAccess")
            if admin is not None and not isinstance(admin, bool):
                raise Bad("wrong-type", f"{where}.adminAccess is not a boolean")
            devices.append(AllocatedDevice(intern(driver), intern(pool), intern(device), bool(admin)))
        reserved = []
        for c in get_list(status, "reservedFor", "status"):
            if not isinstance(c, dict):
                raise Bad("wrong-type", "status.reservedFor[] is not an object")
            if get_str(c, "resource", "status.reservedFor[]") == "pods" and not get_str(
                c, "apiGroup", "status.reservedFor[]"
            ):
                reserved.append((get_str(c, "name", "status.reservedFor[]"), get_str(c, "uid", "status.reservedFor[]")))
        return ResourceClaimRecord(
            namespace=m.namespace,
            name=m.name,
            uid=m.uid,
            resource_version=m.rv,
            devices=tuple(devices),
            reserved_for=tuple(reserved),
        )
    except Bad as e:
        return Rejection(object_ref(obj, "ResourceClaim"), e.reason, e.detail)


async def dra_served(api: k8s.ApiClient, timeout_s: float) -> bool | None:
    """Whether the apiserver serves ``resource.k8s.io/v1`` (API discovery, ``GET /apis``; any identity may read it,
    bootstrap ClusterRole ``system:discovery``). None when discovery did not answer (logged as a warning; the
    caller then watches as if it were served, and a refused watch logs its error)."""
    try:
        with translated():
            got: Any = await k8s.ApisApi(api).get_api_versions(_request_timeout=timeout_s)
    except KubeError as e:  # refused or no answer: not a verdict
        log.warning("DRA API not checked", error=str(e)[:300])
        return None
    for group in got.groups or ():
        if group.name == DRA_GROUP:
            return any(v.version == "v1" for v in group.versions or ())
    return False
