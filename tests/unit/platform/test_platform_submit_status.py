"""Pure parts of submit and status: planning a file, spec comparison, job views, targets, apiserver errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from agent.cli import build_parser
from agent.core.cluster import JobKind
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    Incident,
    Phase,
    encode_incident,
    encode_ledger,
)
from agent.core.policy import RetryLedger
from agent.platform.kubeapi import PlatformError, describe_api_exception, job_phase
from agent.platform.status import (
    PodLine,
    breaker_line,
    job_view,
    leader_line,
    output_width,
    parse_target,
    render_job,
)
from agent.platform.submit import LAST_APPLIED_ANNOTATION, plan_documents, removed_labels, spec_matches

ROOT = Path(__file__).resolve().parents[3]


def _docs(name: str) -> list[Any]:
    return list(yaml.safe_load_all((ROOT / "config" / "examples" / name).read_text(encoding="utf-8")))


def test_plan_uses_the_files_rings_config_and_namespace() -> None:
    plan = plan_documents(_docs("vcjob-mindx-dls-test.yaml"), None)
    assert (plan.kind, plan.namespace, plan.name) == (JobKind.VOLCANO, "vcjob", "mindx-dls-test")
    assert plan.rings_config_from_file
    assert plan.rings_config["metadata"]["name"] == "rings-config-mindx-dls-test"


def test_plan_builds_the_rings_config_when_the_file_has_none() -> None:
    job = _docs("acjob-default-test-pytorch.yaml")[1]
    del job["metadata"]["namespace"]
    plan = plan_documents([job], "team-a")
    assert not plan.rings_config_from_file
    assert plan.job["metadata"]["namespace"] == "team-a"
    assert plan.rings_config == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "rings-config-default-test-pytorch",
            "namespace": "team-a",
            "labels": {"ring-controller.atlas": "ascend-910b"},
        },
        "data": {"hccl.json": '{"status": "initializing"}'},
    }


def _with(change: Any) -> list[Any]:
    docs = _docs("vcjob-mindx-dls-test.yaml")
    change(docs)
    return docs


@pytest.mark.parametrize(
    ("docs", "namespace", "message"),
    [
        pytest.param([_docs("vcjob-mindx-dls-test.yaml")[0]], None, "AscendJob or JobSet, found 0",
                     id="no-job"),
        pytest.param(_with(lambda d: d.append(d[1])), None, "found 2", id="two-jobs"),
        pytest.param(["text"], None, "document 1 is a str", id="not-an-object"),
        pytest.param(_with(lambda d: d.append({"apiVersion": "v1", "kind": "Pod"})), None,
                     "document 3 (v1 Pod) is not a job or ConfigMap", id="pod"),
        pytest.param(_with(lambda d: d[1]["metadata"].pop("name")), None, "no metadata.name", id="no-name"),
        pytest.param(_with(lambda d: d[0]["metadata"].update(name="other")), None,
                     "unexpected ConfigMap(s) other", id="other-config-map"),
        pytest.param(_with(lambda d: d[0]["metadata"].update(namespace="x")), None,
                     "different namespaces: vcjob, x", id="split-namespaces"),
        pytest.param(_docs("vcjob-mindx-dls-test.yaml"), "other", "the file says namespace vcjob but -n says other",
                     id="namespace-conflict"),
    ],
)  # fmt: skip
def test_plan_refuses_bad_files(docs: list[Any], namespace: str | None, message: str) -> None:
    with pytest.raises(PlatformError) as info:
        plan_documents(docs, namespace)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("wanted", "actual", "expected"),
    [
        pytest.param({"a": 1}, {"a": 1, "b": 2}, True, id="server-added-field"),
        pytest.param({"a": 1}, {"a": 2}, False, id="changed-value"),
        pytest.param({"a": [1, 2]}, {"a": [1]}, False, id="shorter-list"),
        pytest.param({"a": [{"x": 1}]}, {"a": [{"x": 1, "y": 0}]}, True, id="defaults-in-list"),
        pytest.param({"a": {"b": 1}}, {"a": 5}, False, id="mapping-vs-scalar"),
        pytest.param({"a": 1}, {}, False, id="missing"),
    ],
)
def test_spec_matches(wanted: Any, actual: Any, expected: bool) -> None:
    assert spec_matches(wanted, actual) is expected


_GRACE_LABELS = {"ring-controller.atlas": "ascend-910b", "fault-scheduling": "grace"}


def _applied(labels: dict[str, str]) -> str:
    return json.dumps({"metadata": {"labels": labels}})


@pytest.mark.parametrize(
    ("wanted", "cluster", "annotations", "removed"),
    [
        pytest.param(_GRACE_LABELS, _GRACE_LABELS, {}, [], id="same"),
        pytest.param({"ring-controller.atlas": "ascend-910b"}, _GRACE_LABELS, {},
                     ["fault-scheduling"], id="grace-dropped"),
        # grace-over-time is scheduler-wide (MindCluster and agent): a file dropping the label asks for nothing new
        pytest.param(_GRACE_LABELS, {**_GRACE_LABELS, "grace-over-time": "900"}, {}, [],
                     id="grace-over-time-is-not-a-job-setting"),
        pytest.param({}, {"fault-retry-times": "2", "pod-rescheduling": "on", "subHealthyStrategy": "ignore",
                          "framework": "pytorch", "tor-affinity": "null", "ring-controller.atlas": "x"}, {},
                     ["fault-retry-times", "framework", "pod-rescheduling", "ring-controller.atlas",
                      "subHealthyStrategy", "tor-affinity"], id="every-fault-tolerance-label"),
        pytest.param(_GRACE_LABELS, {**_GRACE_LABELS, "added-by.webhook/x": "1"}, {}, [], id="server-added-label"),
        pytest.param(_GRACE_LABELS, {**_GRACE_LABELS, "team": "a"},
                     {LAST_APPLIED_ANNOTATION: _applied({**_GRACE_LABELS, "team": "a"})}, ["team"],
                     id="previously-applied-label"),
        pytest.param(_GRACE_LABELS, {**_GRACE_LABELS, "team": "a"}, {LAST_APPLIED_ANNOTATION: "{oops"}, [],
                     id="unreadable-last-applied"),
    ],
)  # fmt: skip
def test_removed_labels(
    wanted: dict[str, str], cluster: dict[str, str], annotations: dict[str, str], removed: list[str]
) -> None:
    current = {"metadata": {"labels": cluster, "annotations": annotations}, "spec": {}}
    assert removed_labels(wanted, current) == removed


@pytest.mark.parametrize(
    ("kind", "status", "phase"),
    [
        pytest.param(JobKind.VOLCANO, None, "", id="vc-no-status"),
        pytest.param(JobKind.VOLCANO, {"state": {"phase": "Restarting"}}, "Restarting", id="vc-phase"),
        pytest.param(JobKind.VOLCANO, {"state": "bad"}, "", id="vc-bad-state"),
        pytest.param(
            JobKind.ASCEND,
            {"conditions": [
                {"type": "Created", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Running", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"},
                {"type": "Restarting", "status": "False", "lastTransitionTime": "2026-01-01T00:02:00Z"},
            ]},
            "Running",
            id="ac-newest-true",
        ),
        pytest.param(JobKind.ASCEND, {"conditions": "bad"}, "", id="ac-bad-conditions"),
    ],
)  # fmt: skip
def test_job_phase(kind: JobKind, status: Any, phase: str) -> None:
    job: dict[str, Any] = {"metadata": {"name": "j"}}
    if status is not None:
        job["status"] = status
    assert job_phase(kind, job) == phase


def _incident(phase: Phase) -> Incident:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    return Incident(
        id="j-0123456789", job_uid="u", kind="vcjob", namespace="ns", name="j", generation="1", phase=phase,
        first_fault_at=t, steps=((Phase.DETECTED, t),), faults=("chip Ascend910-1 on node-1",), fault_count=1,
        action="restart-job",
    )  # fmt: skip


def test_job_view_reads_budgets_and_the_open_incident() -> None:
    job = _docs("vcjob-mindx-dls-test.yaml")[1]
    job["metadata"]["uid"] = "u"
    job["metadata"]["annotations"] = {
        LEDGER_ANNOTATION: encode_ledger(RetryLedger(business_retries_used=2, restarts_used=1)),
        INCIDENT_ANNOTATION: encode_incident(_incident(Phase.ACTING)),
        "other.io/x": "y",
    }
    job["status"] = {"state": {"phase": "Restarting"}, "retryCount": 1}
    view = job_view(JobKind.VOLCANO, job, [PodLine("p0", "Running", "node-1")])
    assert (view.phase, view.retries_used, view.retry_budget) == ("Restarting", 1, 3)
    assert (view.business_used, view.business_budget) == (2, "3")
    assert view.open_incident is not None
    assert view.open_incident.id == "j-0123456789"
    assert [k for k, _ in view.raw_annotations] == [INCIDENT_ANNOTATION, LEDGER_ANNOTATION]
    assert view.problems == ()


def test_job_view_closed_incident_is_not_open() -> None:
    job = {"metadata": {"name": "j", "annotations": {INCIDENT_ANNOTATION: encode_incident(_incident(Phase.FAILED))}}}
    view = job_view(JobKind.ASCEND, job)
    assert view.incident is not None
    assert view.open_incident is None
    assert (view.retries_used, view.retry_budget, view.fault_scheduling) == (0, None, "off")
    assert view.retry_unlimited  # no backoffLimit, no fault-retry-times label: the Ascend Operator's unlimited


@pytest.mark.parametrize(
    ("run_policy", "labels", "ledger", "budget", "unlimited", "shown"),
    [
        pytest.param(None, {}, None, None, True, "0 / unlimited", id="unset-no-label"),
        pytest.param({}, {}, RetryLedger(restarts_used=4), None, True, "4 / unlimited", id="unset-restarted"),
        pytest.param({"backoffLimit": 2}, {}, RetryLedger(restarts_used=1), 2, False, "1 / 2", id="explicit"),
        pytest.param({"backoffLimit": 0}, {}, None, None, True, "0 / unlimited", id="zero-is-unlimited"),
        pytest.param({"backoffLimit": -1}, {}, None, None, True, "0 / unlimited", id="negative-is-unlimited"),
        pytest.param(None, {"fault-retry-times": "3"}, None, 3, False, "0 / 3", id="from-the-label"),
        pytest.param(None, {"fault-retry-times": "x"}, None, None, True, "0 / unlimited", id="unreadable-label"),
        pytest.param({"backoffLimit": "2"}, {}, None, None, False, "0 / -", id="not-an-integer-is-unknown"),
    ],
)  # fmt: skip
def test_job_view_shows_the_ascend_operators_backoff_limit(
    run_policy: dict[str, Any] | None,
    labels: dict[str, str],
    ledger: RetryLedger | None,
    budget: int | None,
    unlimited: bool,
    shown: str,
) -> None:
    """Regression: an AscendJob without ``backoffLimit`` (unlimited for the Ascend Operator) was shown as having
    no budget ("-"), and a limit from the label or ≤ 0 as that number."""
    meta: dict[str, Any] = {"name": "j", "labels": labels}
    if ledger is not None:
        meta["annotations"] = {LEDGER_ANNOTATION: encode_ledger(ledger)}
    job: dict[str, Any] = {"metadata": meta, "spec": {} if run_policy is None else {"runPolicy": run_policy}}
    view = job_view(JobKind.ASCEND, job)
    assert (view.retry_budget, view.retry_unlimited) == (budget, unlimited)
    console = Console(record=True, width=200)
    render_job(view, console)
    assert f"retries:          {shown} (job controller)" in console.export_text()


def test_job_view_keeps_unreadable_annotations_raw() -> None:
    job = {"metadata": {"name": "j", "annotations": {LEDGER_ANNOTATION: "{oops"}}}
    view = job_view(JobKind.VOLCANO, job)
    assert view.ledger is None
    assert view.business_used is None
    assert len(view.problems) == 1
    assert view.problems[0].startswith(f"annotation {LEDGER_ANNOTATION}:")
    assert view.raw_annotations == ((LEDGER_ANNOTATION, "{oops"),)


@pytest.mark.parametrize(
    ("target", "namespace", "expected"),
    [
        pytest.param("job", None, ("ctx-ns", "job"), id="context-namespace"),
        pytest.param("job", "n1", ("n1", "job"), id="dash-n"),
        pytest.param("n2/job", None, ("n2", "job"), id="qualified"),
        pytest.param("n2/job", "n2", ("n2", "job"), id="qualified-agrees"),
    ],
)
def test_parse_target(target: str, namespace: str | None, expected: tuple[str, str]) -> None:
    assert parse_target(target, namespace, "ctx-ns") == expected


@pytest.mark.parametrize(
    ("target", "namespace", "message"),
    [
        pytest.param("a/b/c", None, "expected [NAMESPACE/]JOB, got 'a/b/c'", id="too-many-parts"),
        pytest.param("/job", None, "expected [NAMESPACE/]JOB", id="empty-namespace"),
        pytest.param("n2/job", "n1", "names namespace n2 but -n says n1", id="conflict"),
    ],
)
def test_parse_target_refuses(target: str, namespace: str | None, message: str) -> None:
    with pytest.raises(PlatformError) as info:
        parse_target(target, namespace, "default")
    assert message in str(info.value)
    assert info.value.exit_code == 2


class _ApiException(Exception):
    """Shaped like kubernetes_asyncio's ApiException (status, reason, body): only its data is read."""

    def __init__(self, status: int, reason: str, body: str | None) -> None:
        self.status, self.reason, self.body = status, reason, body


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            json.dumps({"message": 'Job "x" is invalid: spec.a: Required value',
                        "details": {"causes": [{"field": "spec.a", "message": "Required value"}]}}),
            'cannot create Job ns/x: the apiserver said (HTTP 422): Job "x" is invalid: spec.a: Required value',
            id="causes-already-in-message",
        ),
        pytest.param(
            json.dumps({"message": "invalid", "details": {"causes": [{"field": "spec.b", "message": "bad"}]}}),
            "cannot create Job ns/x: the apiserver said (HTTP 422): invalid\n  - spec.b: bad",
            id="causes-listed",
        ),
        pytest.param("not json", "cannot create Job ns/x: the apiserver said (HTTP 422): 422 Unprocessable",
                     id="no-status-body"),
        pytest.param(None, "cannot create Job ns/x: the apiserver said (HTTP 422): 422 Unprocessable", id="no-body"),
    ],
)  # fmt: skip
def test_describe_api_exception(body: str | None, expected: str) -> None:
    assert str(describe_api_exception(_ApiException(422, "Unprocessable", body), "create Job ns/x")) == expected


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        pytest.param(None, "closed (no ConfigMap ns/b yet: the agent writes it when the breaker first trips; "
                     "check leader.namespace)", id="missing"),
        pytest.param({"state": "closed"}, "closed (ConfigMap ns/b)", id="closed"),
        pytest.param({"state": "closed", "reset_at": "2026-01-01T00:00:00+00:00", "reset_by": "oncall"},
                     "closed (ConfigMap ns/b, reset by oncall)", id="reset"),
        pytest.param({"state": "open", "tripped_at": "1767268800.5", "reason": "3 of 10 nodes faulty"},
                     "OPEN since 2026-01-01T12:00:00Z (ConfigMap ns/b): 3 of 10 nodes faulty; "
                     "reset with `fault-agent breaker reset`", id="open"),
        pytest.param({"state": "open", "tripped_at": "x"},
                     "OPEN since an unknown time (ConfigMap ns/b); reset with `fault-agent breaker reset`",
                     id="open-unreadable-time"),
    ],
)  # fmt: skip
def test_breaker_line(data: dict[str, str] | None, shown: str) -> None:
    assert breaker_line(data, "ns/b") == shown


_NOW = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
_RENEWED = datetime(2026, 1, 1, 12, 0, 20, tzinfo=UTC)


@pytest.mark.parametrize(
    ("holder", "renewed", "duration", "shown"),
    [
        pytest.param("pod-a", _RENEWED, 15.0, "pod-a, renewed 2026-01-01T12:00:20Z (10 s ago; Lease ns/l)",
                     id="fresh"),
        pytest.param("pod-a", _RENEWED, 5.0, "pod-a, renewed 2026-01-01T12:00:20Z (10 s ago; Lease ns/l); EXPIRED: "
                     "not renewed for more than 5 s, the holder may be gone", id="expired"),
        pytest.param("pod-a", None, 15.0, "pod-a (Lease ns/l, never renewed)", id="never-renewed"),
        pytest.param(None, _RENEWED, 15.0, "unknown (Lease ns/l has no holder: no agent replica leads)",
                     id="no-holder"),
        pytest.param("", None, None, "unknown (Lease ns/l has no holder: no agent replica leads)", id="empty-holder"),
    ],
)  # fmt: skip
def test_leader_line(holder: str | None, renewed: datetime | None, duration: float | None, shown: str) -> None:
    assert leader_line(holder, renewed, duration, "ns/l", _NOW) == shown


@pytest.mark.parametrize(
    ("requested", "terminal", "environ", "width"),
    [
        pytest.param(None, True, {}, None, id="terminal-asks-rich"),
        pytest.param(None, False, {}, 200, id="pipe-is-wide"),
        pytest.param(None, False, {"COLUMNS": "120"}, None, id="pipe-with-columns"),
        pytest.param(None, False, {"COLUMNS": "x"}, 200, id="pipe-bad-columns"),
        pytest.param(90, False, {}, 90, id="requested-in-pipe"),
        pytest.param(90, True, {"COLUMNS": "120"}, 90, id="requested-on-terminal"),
    ],
)
def test_output_width(requested: int | None, terminal: bool, environ: dict[str, str], width: int | None) -> None:
    assert output_width(requested, terminal, environ) == width


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("39", "argument --width: must be at least 40 columns, got 39", id="too-narrow"),
        pytest.param("0", "must be at least 40 columns, got 0", id="zero"),
        pytest.param("-5", "must be at least 40 columns, got -5", id="negative"),
        pytest.param("wide", "argument --width: expected a number of columns, got 'wide'", id="not-a-number"),
    ],
)
def test_status_width_refuses_nonsense(value: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser("status").parse_args(["status", f"--width={value}"])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_status_width_accepts_40() -> None:
    assert build_parser("status").parse_args(["status", "--width", "40"]).width == 40


async def test_status_agent_lines_say_forbidden_when_rbac_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator whose role may not read the agent's namespace gets "unknown (forbidden …)", not a crash and
    not a made-up state."""
    from kubernetes_asyncio import client as k8s
    from kubernetes_asyncio.client.exceptions import ApiException

    from agent.platform.status import agent_state_lines

    async def forbidden(self: object, name: str, namespace: str, **kw: object) -> object:
        raise ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(k8s.CoreV1Api, "read_namespaced_config_map", forbidden)
    monkeypatch.setattr(k8s.CoordinationV1Api, "read_namespaced_lease", forbidden)
    monkeypatch.setenv("FAULT_AGENT_LEADER__NAMESPACE", "ops")
    api = k8s.ApiClient()
    try:
        lines = dict(await agent_state_lines(api, None))
    finally:
        await api.close()
    assert lines["breaker"] == "unknown (forbidden to read ConfigMap ops/fault-agent-breaker: HTTP 403)"
    assert lines["leader"].startswith("unknown (forbidden to read Lease ops/")
    assert lines["leader"].endswith(": HTTP 403)")


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "abc"])
def test_submit_timeout_must_be_positive_seconds(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from agent.platform.submit import configure

    parser = argparse.ArgumentParser(prog="fault-agent submit")
    configure(parser)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["-f", "job.yaml", "--timeout", value])
    assert exit_info.value.code == 2
    assert "argument --timeout" in capsys.readouterr().err


def test_status_says_when_the_jobs_restart_policy_is_not_never() -> None:
    """Issue 13 B12: `fault-agent status` says that the job's restart policy is not Never, and why it matters."""
    from dataclasses import replace

    from rich.console import Console

    from agent.platform.status import render_job

    job = {"metadata": {"name": "j", "namespace": "ns", "labels": {"fault-retry-times": "2"}}}
    job["metadata"]["annotations"] = {
        INCIDENT_ANNOTATION: encode_incident(replace(_incident(Phase.RESTARTING), reason="business failure; ..."))
    }
    pods = [PodLine("j-0", "Running", "n1", 1, "OnFailure"), PodLine("j-1", "Running", "n1", 0, "Never")]
    view = job_view(JobKind.VOLCANO, job, pods)
    assert view.restart_policy_warning.startswith("the job's restart policy is OnFailure (pods j-0), not Never")
    console = Console(width=300, record=True)
    render_job(view, console)
    text = console.export_text()
    assert "restart policy: the job's restart policy is OnFailure (pods j-0), not Never" in text
    assert "reason: business failure; ..." in text
    never = job_view(JobKind.VOLCANO, job, [PodLine("j-1", "Running", "n1", 0, "Never"), PodLine("j-2", "", "")])
    assert never.restart_policy_warning == ""


def _pod_rescheduling_job() -> dict[str, Any]:
    job = _docs("vcjob-mindx-dls-test.yaml")[1]
    job["metadata"]["labels"]["pod-rescheduling"] = "on"
    return dict(job)


def test_plan_builds_a_reset_config_when_the_labels_need_one() -> None:
    plan = plan_documents([_pod_rescheduling_job()], None)
    assert plan.reset_config is not None
    assert not plan.reset_config_from_file
    assert plan.reset_config["metadata"] == {
        "name": "reset-config-mindx-dls-test",
        "namespace": "vcjob",
        "labels": {"reset": "true"},
    }
    assert set(plan.reset_config["data"]) == {"checkCode", "reset.json"}


def test_plan_takes_the_files_reset_config_and_builds_none_for_the_guides_job() -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "reset-config-mindx-dls-test", "labels": {"reset": "true"}},
        "data": {"reset.json": "{}"},
    }
    plan = plan_documents([_pod_rescheduling_job(), cm], None)
    assert plan.reset_config_from_file
    assert plan.reset_config is not None
    assert plan.reset_config["metadata"]["namespace"] == "vcjob"
    assert plan_documents(_docs("vcjob-mindx-dls-test.yaml"), None).reset_config is None


@pytest.mark.parametrize(
    ("run_policy", "labels", "versions", "ledger", "shown", "rule"),
    [
        pytest.param({"backoffLimit": 2}, {}, ("2", "2"), None, "2 / 2",
                     "the Ascend Operator fails the job at pod version > spec.runPolicy.backoffLimit 2; version is 2 "
                     "(0 restarts left)", id="at-the-limit"),
        pytest.param({"backoffLimit": 2}, {}, ("1", "0"), None, "1 / 2",
                     "fails the job at pod version > spec.runPolicy.backoffLimit 2; version is 1 (1 restarts left)",
                     id="pod-level-restart-counted"),
        pytest.param(None, {"fault-retry-times": "3"}, ("1",), RetryLedger(restarts_used=2), "2 / 3",
                     "pod version > the fault-retry-times label (no spec.runPolicy.backoffLimit) 3; version is 2",
                     id="ledger-ahead-of-the-pods"),
        pytest.param(None, {}, ("7",), None, "7 / unlimited", "no restart limit", id="unlimited"),
    ],
)  # fmt: skip
def test_ascendjob_status_counts_the_operators_pod_version(
    run_policy: dict[str, Any] | None,
    labels: dict[str, str],
    versions: tuple[str, ...],
    ledger: RetryLedger | None,
    shown: str,
    rule: str,
) -> None:
    """Regression (issue 35): the AscendJob's restarts were the agent's ledger only (its hardware restarts), so a
    job whose pods had been restarted by someone else, or for a business failure, was shown with restarts left
    that the Ascend Operator would refuse."""
    meta: dict[str, Any] = {"name": "j", "labels": labels}
    if ledger is not None:
        meta["annotations"] = {LEDGER_ANNOTATION: encode_ledger(ledger)}
    job: dict[str, Any] = {"metadata": meta, "spec": {} if run_policy is None else {"runPolicy": run_policy}}
    pods = [PodLine(f"j-{i}", "Running", "n1", version=v) for i, v in enumerate(versions)]
    view = job_view(JobKind.ASCEND, job, pods)
    console = Console(record=True, width=250)
    render_job(view, console)
    text = console.export_text()
    assert f"retries:          {shown} (job controller)" in text
    assert rule in text


def test_status_shows_an_incident_held_by_the_breaker() -> None:
    """Issue 41: with the breaker open, `status` said "open incident: none" for a job sitting on a SeparateNPU
    chip; the held incident in the job's record is shown open, in state held-by-breaker, with its reason."""
    from datetime import UTC, datetime

    from agent.core.incidents import Incident, Phase, encode_incident
    from agent.core.records import KEY_INCIDENT, KEY_LEDGER
    from agent.platform.status import render_table

    at = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    incident = Incident(
        id="j-0123456789", job_uid="uid-j", kind="vcjob", namespace="ns", name="j", generation="0",
        phase=Phase.HELD, first_fault_at=at, steps=((Phase.DETECTED, at), (Phase.HELD, at)),
        faults=("chip:SeparateNPU@n1[Ascend910-3] 80E01801",), fault_count=1, action="restart-job", mode="force",
        reason="held by the open circuit breaker: the policy would restart-job in force mode for chip:SeparateNPU@n1"
        "[Ascend910-3] 80E01801; nothing is restarted until a person runs `fault-agent breaker reset`",
    )  # fmt: skip
    record = {KEY_INCIDENT: encode_incident(incident), KEY_LEDGER: encode_ledger(RetryLedger())}
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "uid-j", "labels": {"fault-scheduling": "force"}}}
    view = job_view(JobKind.VOLCANO, job, record=record)
    console = Console(record=True, width=300)
    render_job(view, console)
    text = console.export_text()
    assert "open incident:    j-0123456789, held-by-breaker, action restart-job (force), 1 fault(s)" in text
    [reason] = [line for line in text.splitlines() if line.startswith("  reason:")]
    assert "restarts left" not in reason
    assert "restarting the job" not in reason
    assert "nothing is restarted until a person runs `fault-agent breaker reset`" in text
    table = Console(record=True, width=300)
    render_table([view], table)
    assert "held-by-breaker" in table.export_text()
