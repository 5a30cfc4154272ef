"""deploy/prometheusrule.yaml: promtool check + promtool unit tests, and the rules only use metrics we export.

Needs `promtool` on PATH (Debian: `apt-get install prometheus`). Missing promtool is a failure, not a skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from agent.sinks.metrics import AgentMetrics

REPO = Path(__file__).resolve().parents[2]
RULE = REPO / "deploy" / "prometheusrule.yaml"
PROMTOOL_TESTS = REPO / "tests" / "promtool" / "alerts_test.yaml"

# What the issue asks to alert on -> our alert names.
REQUIRED = {
    "recovery slower than a threshold": "FaultAgentRecoverySlow",
    "recovery failed": "FaultAgentRecoveryFailed",
    "retry budget exhausted": "FaultAgentRetryBudgetExhausted",
    "breaker open": "FaultAgentBreakerOpen",
    "no leader": "FaultAgentNoLeader",
    "kafka publishing failing": "FaultAgentKafkaPublishFailing",
    "outbox growing": "FaultAgentOutboxGrowing",
    "watch lag": "FaultAgentWatchLag",
}


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found on PATH: install Debian's 'prometheus' package (apt-get install prometheus)")
    return path


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULE.read_text())
    return [rule for group in doc["spec"]["groups"] for rule in group["rules"]]


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """rules.yaml (the PrometheusRule's spec) beside a copy of the promtool test file."""
    doc = yaml.safe_load(RULE.read_text())
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(doc["spec"], sort_keys=False))
    shutil.copy(PROMTOOL_TESTS, tmp_path / "alerts_test.yaml")
    return tmp_path


def test_promtool_check_rules(rules_dir: Path) -> None:
    proc = subprocess.run(
        [_promtool(), "check", "rules", str(rules_dir / "rules.yaml")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in proc.stdout


def test_promtool_unit_tests(rules_dir: Path) -> None:
    proc = subprocess.run(
        [_promtool(), "test", "rules", str(rules_dir / "alerts_test.yaml")],
        capture_output=True,
        text=True,
        check=False,
        cwd=rules_dir,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_has_a_promtool_test() -> None:
    tests = yaml.safe_load(PROMTOOL_TESTS.read_text())["tests"]
    tested = {case["alertname"] for t in tests for case in t.get("alert_rule_test", []) if case.get("exp_alerts")}
    alerts = {r["alert"] for r in _rules()}
    assert sorted(alerts - tested) == []


@pytest.mark.parametrize(("need", "alert"), sorted(REQUIRED.items()))
def test_required_alert_exists(need: str, alert: str) -> None:
    assert alert in {r["alert"] for r in _rules()}, need


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: str(r["alert"]))
def test_alert_has_severity_and_text(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in {"info", "warning", "critical"}
    assert rule["annotations"]["summary"].strip()
    assert rule["annotations"]["description"].strip()


def _exported_series() -> set[str]:
    reg = CollectorRegistry()
    AgentMetrics(reg)
    names: set[str] = set()
    for fam in reg.collect():
        names.add(fam.name)
        suffixes = {
            "counter": ["_total"],
            "histogram": ["_bucket", "_count", "_sum"],
            "info": ["_info"],
        }.get(fam.type, [""])
        names.update(fam.name + s for s in suffixes)
    return names


def test_rules_reference_only_exported_metrics() -> None:
    exported = _exported_series()
    used = {m for r in _rules() for m in re.findall(r"\bfault_agent_[a-z_]+", r["expr"])}
    assert used, "rules reference no fault_agent_ metric"
    assert sorted(used - exported) == []
