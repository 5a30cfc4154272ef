"""The testbed's ClusterD stand-in (testbed/clusterd.py, aggregation by testbed/mcencode) on the real apiserver:
what the per-node ConfigMaps say is what ``cluster-info-*`` say, read by the agent's own detect path; a ConfigMap
ClusterD would refuse (CheckCode mismatch) leaves the aggregate as it was; a NodeD ConfigMap deleted and a node's
device ConfigMap deleted leave it. ClusterD writes into the test's namespace only."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agent.platform.detect_cli import detect_objects, display_kind
from agent.settings import Settings
from testbed import clusterd
from testbed.cluster import Testbed
from testbed.inject import DEVICE_NS, ChipFault, Injector, SwitchFault
from testbed.rest import Rest

pytestmark = pytest.mark.integration

T = TypeVar("T")


def _eventually(probe: Callable[[], T | None], what: str, timeout_s: float = 30.0) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


def _cluster_info(rest: Rest, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = rest.get(f"/api/v1/namespaces/{namespace}/configmaps")["items"]
    return [cm for cm in items if cm["metadata"]["name"].startswith("cluster-info-")]


def _faults(rest: Rest, namespace: str, nodes: set[str]) -> set[tuple[str, str, str, tuple[str, ...], str]]:
    kube = {"fault_source": "clusterd", "node_info_namespace": namespace}  # as `run` watching this namespace
    got = detect_objects(
        _cluster_info(rest, namespace), datetime.now(UTC), settings=Settings.model_validate({"kube": kube})
    )
    assert [r for r in got.rejections if r.reason != "unwatched"] == []
    return {(display_kind(f), f.level.wire_name, f.node, f.chips, f.source.name) for f in got.faults if f.node in nodes}


def _scenario(testbed: Testbed, namespace: str, log: Path) -> None:
    rest = testbed.rest()
    inj = Injector(rest)
    a, b = (f"cd-{uuid.uuid4().hex[:6]}" for _ in range(2))
    inj.add_nodes([a, b])
    try:
        with clusterd.running(testbed.kubeconfig, namespace, log):
            inj.chip_fault(a, [ChipFault(3)])
            inj.node_fault(a)
            inj.switch_fault(b, [SwitchFault(level="Separate")])
            want = {
                ("chip", "SeparateNPU", a, ("Ascend910-3",), "cluster-info-device-0"),
                ("node", "SeparateNPU", a, (), "cluster-info-node-cm"),
                ("switch", "SeparateNPU", b, (), "cluster-info-switch-0"),
            }
            _eventually(lambda: _faults(rest, namespace, {a, b}) == want, f"ClusterD's view of {a} and {b}")
            for cm in _cluster_info(rest, namespace):  # one key, named like the ConfigMap; the consumer label
                assert list(cm["data"]) == [cm["metadata"]["name"]]
                assert cm["metadata"]["labels"] == {"mx-consumer-volcano": "true"}

            # a hand-edited device ConfigMap: ClusterD refuses it and keeps b's previous entry
            path = f"/api/v1/namespaces/{DEVICE_NS}/configmaps/mindx-dl-deviceinfo-{b}"
            cm = rest.get(path)
            cfg = json.loads(cm["data"]["DeviceInfoCfg"])
            cfg["DeviceInfo"]["UpdateTime"] += 1  # CheckCode no longer matches
            cm["data"]["DeviceInfoCfg"] = json.dumps(cfg)
            del cm["data"]["SwitchInfoCfg"]
            rest.request("PUT", path, cm)
            _eventually(lambda: "not taken" in log.read_text(), "the stand-in to log the refused ConfigMap")
            time.sleep(1.0)  # what it would have written by now
            assert _faults(rest, namespace, {a, b}) == want

            inj.node_fault_cleared(a)  # NodeD deletes its ConfigMap: the entry leaves cluster-info-node-cm
            want -= {("node", "SeparateNPU", a, (), "cluster-info-node-cm")}
            _eventually(lambda: _faults(rest, namespace, {a, b}) == want, f"{a}'s NodeD entry to go")
            inj.delete_nodes([a])  # its device ConfigMap too
            want = {w for w in want if w[2] != a}
            _eventually(lambda: _faults(rest, namespace, {a, b}) == want, f"{a}'s device entry to go")
    finally:
        inj.delete_nodes([a, b])


async def test_the_clusterd_stand_in_aggregates_what_the_per_node_configmaps_say(
    testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    await asyncio.to_thread(_scenario, testbed, namespace, tmp_path / "clusterd.log")
