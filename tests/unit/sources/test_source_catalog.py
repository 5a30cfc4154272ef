"""Each watched source is declared once (agent.sources.catalog); the state, the watches, the metrics, the
detectors and the scenario format follow that declaration."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent.core.cluster import JobKind
from agent.core.faults import FaultKind
from agent.engine import detecting
from agent.engine.detecting import DetectPipeline
from agent.replay.scenario import KINDS
from agent.runtime.clock import SystemClock
from agent.settings import KubeSettings, Settings
from agent.sinks import metrics
from agent.sources.catalog import BY_NAME, CATALOG, ConverterOptions, source
from agent.sources.state import SOURCES, ClusterState
from agent.sources.watchers import resources


def _every_watch() -> list[Any]:
    """The watches of settings that turn every source on, under both fault sources."""
    out = []
    for fault_source in ("per-node", "clusterd"):
        kube = KubeSettings(
            fault_source=fault_source,  # type: ignore[arg-type]
            podgroup_info_enabled=True,
            progress_leases_enabled=True,
            jobsets_enabled=True,
            dra="on",
        )
        out += resources(kube, records_namespace="fault-agent")
    return out


def test_names_are_unique_and_the_state_keeps_one_store_per_source() -> None:
    assert len(BY_NAME) == len(CATALOG)
    assert tuple(s.name for s in CATALOG) == SOURCES
    state = ClusterState()
    for s in CATALOG:
        assert state.store(s.name) is getattr(state, s.store), s.name


def test_every_source_is_watched_with_its_declared_api() -> None:
    watches = _every_watch()
    assert {w.source for w in watches} == set(BY_NAME)
    for w in watches:
        s = source(w.source)
        assert (w.kind, w.group, w.version, w.plural) == (s.kind, s.group, s.version, s.plural), w.source
        if not s.namespaced:
            assert w.namespace is None, w.source  # a cluster-scoped kind is watched without a namespace


def test_an_unknown_source_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        source("trainjobs")


def test_the_job_sources_are_the_job_kinds_apis() -> None:
    for name, kind in (("vcjobs", JobKind.VOLCANO), ("acjobs", JobKind.ASCEND), ("jobsets", JobKind.JOBSET)):
        s = source(name)
        assert (s.kind, s.api_version, s.plural) == (kind.api_kind, f"{kind.api_group}/{kind.api_version}", kind.plural)


def test_every_converter_is_built_from_the_settings() -> None:
    options = ConverterOptions(("huawei.com/Ascend910",), ("accelerator",), ("hold",))
    for s in CATALOG:
        convert = s.converter(options)
        assert callable(convert), s.name


def test_the_metrics_label_values_come_from_the_catalog() -> None:
    assert tuple(s.name for s in CATALOG if s.name != "jobrecords") == metrics.WATCH_RESOURCES
    assert metrics.LAG_SOURCES == ("pods", "nodes", "deviceinfo", "nodeinfo")
    assert set(metrics.FAULT_SOURCES) == set(detecting.FAULT_SOURCES)
    kinds = {k.value for k in FaultKind}
    for label, reported in metrics.FAULT_SOURCES.items():
        assert set(reported) <= kinds, label


async def test_each_detector_counts_under_its_sources_declared_label() -> None:
    pipeline = DetectPipeline(Settings(), ClusterState(), asyncio.Queue(), SystemClock())
    declared = {s.name for s in CATALOG if s.detector}
    assert set(pipeline.detectors) == declared
    for name, detector in pipeline.detectors.items():
        if hasattr(detector, "label"):
            assert detector.label == source(name).detector, name


def test_the_scenario_kinds_are_the_catalogs() -> None:
    for resource, kind in KINDS.items():
        s = next(s for s in CATALOG if s.plural == kind.plural)
        assert (kind.api_version, kind.kind, kind.namespaced) == (s.api_version, s.kind, s.namespaced), resource
    assert {k.plural for k in KINDS.values()} == {s.plural for s in CATALOG}
