"""One fault source, ClusterD's or the per-node ConfigMaps, never both (issue 36, item 7).

MindCluster's scheduler reads only ClusterD's ``cluster-info-*`` when ClusterD runs (``useClusterInfoManager``,
``component/ascend-for-volcano/common/k8s/cmmgr.go`` ``InitCmInformer``); the agent chooses the same way at start
(agent.core.fault_source) and says so (agent.sources.fault_source).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog

from agent.core.fault_source import FaultSource, choose_fault_source
from agent.platform.detect_cli import detect_objects
from agent.settings import KubeSettings, Settings, SettingsError, load_settings
from agent.sources.fault_source import SourceCheck
from agent.sources.watchers import resources

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"
PER_NODE_SEPARATE = FIXTURES / "deviceinfo-chip-separate-multi-code.json"  # kube-system/mindx-dl-deviceinfo-worker-02
CLUSTERD_HEALTHY = FIXTURES / "mindcluster" / "clusterd-device-empty.json"  # mindx-dl/cluster-info-device-0: ""
NOW = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("setting", "found", "source", "warns", "unread"),
    [
        pytest.param("auto", [], FaultSource.PER_NODE, False, False, id="auto-no-clusterd"),
        pytest.param("auto", ["cluster-info-node-cm"], FaultSource.CLUSTERD, False, False, id="auto-clusterd"),
        pytest.param("auto", None, FaultSource.PER_NODE, True, False, id="auto-list-failed"),
        pytest.param("per-node", [], FaultSource.PER_NODE, False, False, id="per-node"),
        pytest.param("per-node", ["cluster-info-device-0"], FaultSource.PER_NODE, True, True, id="per-node-unread"),
        pytest.param("clusterd", ["cluster-info-device-0"], FaultSource.CLUSTERD, False, False, id="clusterd"),
        pytest.param("clusterd", [], FaultSource.CLUSTERD, True, False, id="clusterd-none-there"),
    ],
)
def test_choose_fault_source(
    setting: str, found: list[str] | None, source: FaultSource, warns: bool, unread: bool
) -> None:
    choice = choose_fault_source(setting, found, "mindx-dl")
    assert choice.source is source
    assert bool(choice.warning) is warns
    assert choice.clusterd_unread is unread
    assert choice.reason


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="none of auto, per-node, clusterd"):
        choose_fault_source("both", [], "mindx-dl")


def _watched(source: FaultSource) -> set[str]:
    return {r.source for r in resources(KubeSettings(), fault_source=source) if r.kind == "ConfigMap"}


def test_with_clusterd_its_view_is_the_only_fault_source() -> None:
    assert _watched(FaultSource.CLUSTERD) == {"clusterinfo", "faultconfig"}
    assert _watched(FaultSource.PER_NODE) == {"deviceinfo", "nodeinfo", "faultconfig", "publicfault"}


def _objects(*paths: Path) -> list[Any]:
    return [json.loads(p.read_text()) for p in paths]


def test_a_fault_clusterd_holds_back_is_not_acted_on_by_default() -> None:
    """Regression (fails on the code before): with ClusterD's view present and saying the chip is healthy (a fault
    it holds back while the job recovers in place, or silenced for the job), the default settings read the raw
    per-node ConfigMap and raised its SeparateNPU fault, so the agent restarted a job ClusterD was recovering."""
    got = detect_objects(_objects(PER_NODE_SEPARATE, CLUSTERD_HEALTHY), NOW, settings=Settings())
    assert got.faults == []
    assert [(r.source.name, r.reason) for r in got.rejections] == [("mindx-dl-deviceinfo-worker-02", "unwatched")]
    assert "auto chose clusterd" in got.rejections[0].detail


def test_without_clusterd_the_per_node_view_is_read_by_default() -> None:
    got = detect_objects(_objects(PER_NODE_SEPARATE), NOW, settings=Settings())
    assert [(f.node, f.level.name) for f in got.faults] == [("worker-02", "SEPARATE")]


@pytest.mark.parametrize(
    ("env", "replacement"),
    [
        pytest.param("FAULT_AGENT_KUBE__CLUSTER_INFO_ENABLED", "kube.fault_source: clusterd", id="cluster-info"),
        pytest.param("FAULT_AGENT_KUBE__DEVICE_INFO_ENABLED", "kube.fault_source: per-node", id="device-info"),
    ],
)
def test_the_replaced_settings_name_their_replacement(
    env: str, replacement: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(env, "true")
    with pytest.raises(SettingsError, match=replacement):
        load_settings()
    monkeypatch.delenv(env)
    path = tmp_path / "agent.yaml"
    path.write_text("kube:\n  node_info_enabled: false\n")
    with pytest.raises(SettingsError, match=r"'kube\.node_info_enabled' was replaced by kube\.fault_source"):
        load_settings(path)


class Gauges:
    def __init__(self) -> None:
        self.source = ""
        self.unread: list[bool] = []

    def fault_source(self, source: str) -> None:
        self.source = source

    def clusterd_unread(self, unread: bool) -> None:
        self.unread.append(unread)


def test_the_check_says_which_source_and_warns_once_about_clusterd_unread() -> None:
    gauges = Gauges()
    check = SourceCheck(choose_fault_source("auto", [], "mindx-dl"), gauges, "mindx-dl")
    with structlog.testing.capture_logs() as logs:
        check.report()
        check.seen(["cluster-info-device-0"])  # ClusterD installed after the agent started
        check.seen(["cluster-info-device-0"])
        check.seen([])
    assert gauges.source == "per-node"
    assert gauges.unread == [False, True, True, False]
    assert [(e["log_level"], e["event"][:30]) for e in logs] == [
        ("info", "fault source"),
        ("warning", "ClusterD's ConfigMaps exist (c"),
        ("info", "ClusterD's ConfigMaps are gone"),
    ]
    assert logs[0]["source"] == "per-node"
    assert logs[0]["setting"] == "auto"


def test_the_check_warns_at_start_when_clusterd_is_there_and_not_read() -> None:
    gauges = Gauges()
    check = SourceCheck(choose_fault_source("per-node", ["cluster-info-node-cm"], "mindx-dl"), gauges, "mindx-dl")
    with structlog.testing.capture_logs() as logs:
        check.report()
    assert gauges.unread == [True]
    assert [e["log_level"] for e in logs] == ["info", "warning"]
    assert "are not read" in logs[1]["event"]
