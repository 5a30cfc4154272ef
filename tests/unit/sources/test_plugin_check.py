"""agent.sources.plugin_check: the warning and the gauge follow the plugin ConfigMap's evidence, once per change."""

from __future__ import annotations

from structlog.testing import capture_logs

from agent.core.observe import ConfigMapSeen, PluginEvidence
from agent.kube.errors import KubeApiError, KubeError, translated
from agent.sources.plugin_check import PluginCheck

CM = ConfigMapSeen("7", frozenset({"fault-node", "remain-retry-times"}))


class Gauge:
    def __init__(self) -> None:
        self.sets: list[tuple[bool, str]] = []

    def mindcluster_plugin(self, active: bool, mode: str) -> None:
        self.sets.append((active, mode))


def test_act_mode_warns_once_per_change_and_sets_the_gauge() -> None:
    gauge = Gauge()
    check = PluginCheck("act", gauge)
    with capture_logs() as logs:
        assert check.seen(CM) is PluginEvidence.PRESENT
        assert check.seen(CM) is PluginEvidence.PRESENT  # unchanged: said once
        assert check.seen(ConfigMapSeen("8", CM.keys)) is PluginEvidence.UPDATED
        assert check.seen(None) is PluginEvidence.ABSENT
    errors = [e for e in logs if e["log_level"] == "error"]
    assert len(errors) == 2
    assert all("FAULT_AGENT_POLICY__MODE=observe" in e["event"] for e in errors)
    assert gauge.sets == [(True, "act"), (True, "act"), (False, "act")]


def test_observe_mode_sets_the_gauge_without_a_warning() -> None:
    gauge = Gauge()
    check = PluginCheck("observe", gauge)
    with capture_logs() as logs:
        check.seen(CM)
    assert [e for e in logs if e["log_level"] in ("error", "warning")] == []
    assert gauge.sets == [(True, "observe")]


def test_no_configmap_sets_the_gauge_to_zero_at_the_first_read() -> None:
    gauge = Gauge()
    PluginCheck("act", gauge).seen(None)
    assert gauge.sets == [(False, "act")]


def test_a_failed_read_is_logged_once_per_kind() -> None:
    check = PluginCheck("act", Gauge())
    with capture_logs() as logs:
        check.failed(KubeApiError("HTTP 403: Forbidden", status=403))
        check.failed(KubeApiError("HTTP 403: Forbidden", status=403))
        check.failed(_lost(TimeoutError()))
    assert [e["error"] for e in logs] == ["HTTP 403", "TimeoutError"]


def _lost(e: Exception) -> KubeError:
    """`e` as the edge hands it on: a KubeConnectionError caused by it (agent.kube.errors.translated)."""
    try:
        with translated():
            raise e
    except KubeError as typed:
        return typed
    raise AssertionError("not translated")
