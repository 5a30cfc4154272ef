"""bench/bench_scale.py's ``--source clusterd``: the chunk sizing against the Go aggregator, finding a node's chunk,
the ConfigMaps a report rewrites, and the argument checks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import pytest
from support.bench_scripts import load_bench_script

from testbed.inject import ChipFault, device_info_cm, device_info_cms

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
SMALL = ["--nodes", "20", "--pods", "200", "--jobs", "10", "--faults", "2"]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench_script("bench_scale.py", "_bench_scale_clusterd_under_test")


@pytest.fixture
def report(bench: ModuleType) -> Iterator[Any]:
    r = bench.ClusterDReport(per_chunk=100)
    try:
        yield r
    finally:
        r.close()


def _device_chunks(report: Any, bench: ModuleType) -> dict[str, str]:
    cms = report.encoder.request("clusterd-report", namespace=bench.CLUSTERD_NS)
    return {
        cm["metadata"]["name"]: next(iter(cm["data"].values()))
        for cm in cms
        if cm["metadata"]["name"].startswith("cluster-info-device-")
    }


def test_chunk_limit_makes_go_split_about_the_asked_number_of_nodes(bench: ModuleType, report: Any) -> None:
    # names of different lengths (node-7 … node-349), as the benchmark's scale-node-<i>
    for cm in device_info_cms([f"node-{i}" for i in range(350)], now=T0):
        report.put(cm)
    report.size_chunks(350)
    sizes = sorted(len(json.loads(text)) for text in _device_chunks(report, bench).values())
    assert sum(sizes) == 350
    assert len(sizes) == 4  # 100, 100, 100, 50 give or take the names' lengths
    assert sizes[0] < 95, sizes  # the last one, the rest
    assert all(95 <= n <= 105 for n in sizes[1:]), sizes


def test_chunk_limit_from_one_object(bench: ModuleType) -> None:
    # 10 entries of 99 bytes joined by 9 commas in braces: 2 + 990 + 9 = 1001 bytes, 100 bytes per entry; room
    # for 3.5 of them
    assert bench.chunk_limit(1001, 10, 3) == 351
    with pytest.raises(ValueError, match="no chunk limit"):
        bench.chunk_limit(1001, 0, 3)
    with pytest.raises(ValueError, match="no chunk limit"):
        bench.chunk_limit(10, 10, 3)


def test_chunk_holding_matches_keys_not_values_or_longer_names(bench: ModuleType) -> None:
    chunks = {
        "cluster-info-device-0": json.dumps(
            {"mindx-dl-deviceinfo-node-10": {"CmName": "mindx-dl-deviceinfo-node-1"}}, separators=(",", ":")
        ),
        "cluster-info-device-1": json.dumps(
            {"mindx-dl-deviceinfo-node-1": {"CmName": "mindx-dl-deviceinfo-node-1"}}, separators=(",", ":")
        ),
    }
    assert bench.chunk_holding(chunks, "mindx-dl-deviceinfo-node-1") == "cluster-info-device-1"
    assert bench.chunk_holding(chunks, "mindx-dl-deviceinfo-node-10") == "cluster-info-device-0"
    assert bench.chunk_holding(chunks, "mindx-dl-deviceinfo-node-2") is None


def test_a_chip_fault_changes_the_chunk_that_holds_its_node(bench: ModuleType, report: Any) -> None:
    names = [f"node-{i:03d}" for i in range(300)]
    for cm in device_info_cms(names, now=T0):
        report.put(cm)
    report.size_chunks(300)
    before = report.encoder.request("clusterd-report", namespace=bench.CLUSTERD_NS)
    written = {cm["metadata"]["name"]: cm["data"] for cm in before}
    assert bench.changed_configmaps(before, written) == []
    report.put(device_info_cm("node-150", (ChipFault(0),), now=T0))
    after = report.encoder.request("clusterd-report", namespace=bench.CLUSTERD_NS)
    changed = bench.changed_configmaps(after, written)
    holder = bench.chunk_holding(_device_chunks(report, bench), "mindx-dl-deviceinfo-node-150")
    assert holder is not None
    assert holder in {cm["metadata"]["name"] for cm in changed}
    text = next(iter(next(cm for cm in changed if cm["metadata"]["name"] == holder)["data"].values()))
    assert "80E3A201" in json.loads(text)["mindx-dl-deviceinfo-node-150"]["DeviceList"]["huawei.com/Ascend910-Fault"]


def test_clusterd_source_arguments(bench: ModuleType) -> None:
    args = bench.parse_args([*SMALL, "--source", "clusterd"])
    assert (args.source, args.agent_fault_source, args.nodes_per_chunk) == ("clusterd", "auto", 1000)
    args = bench.parse_args([*SMALL, "--source", "clusterd", "--agent-fault-source", "clusterd"])
    assert args.agent_fault_source == "clusterd"
    with pytest.raises(SystemExit, match="would not read"):
        bench.parse_args([*SMALL, "--source", "clusterd", "--agent-fault-source", "per-node"])
    with pytest.raises(SystemExit, match="--nodes-per-chunk"):
        bench.parse_args([*SMALL, "--source", "clusterd", "--nodes-per-chunk", "0"])


def test_both_sources_need_jobs_for_four_windows(bench: ModuleType) -> None:
    assert bench.arm_sources("both") == ["per-node", "clusterd"]
    assert bench.arm_sources("clusterd") == ["clusterd"]
    bench.parse_args(["--nodes", "20", "--pods", "200", "--jobs", "10", "--faults", "2", "--source", "both"])
    with pytest.raises(SystemExit, match="--faults × 4"):
        bench.parse_args(["--nodes", "20", "--pods", "200", "--jobs", "10", "--faults", "3", "--source", "both"])
    with pytest.raises(SystemExit, match="--apf measures the per-node source"):
        bench.parse_args([*SMALL, "--apf", "--source", "clusterd"])


def test_kwok_configuration_sets_every_kind_of_worker(bench: ModuleType) -> None:
    cfg = bench.kwok_configuration(16)
    assert (cfg["apiVersion"], cfg["kind"]) == ("config.kwok.x-k8s.io/v1alpha1", "KwokConfiguration")
    assert cfg["options"] == {
        "podPlayStageParallelism": 16,
        "nodePlayStageParallelism": 16,
        "nodeLeaseParallelism": 16,
    }
    with pytest.raises(ValueError, match="at least 1"):
        bench.kwok_configuration(0)
