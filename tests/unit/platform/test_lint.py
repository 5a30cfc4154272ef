"""`fault-agent lint`: one broken file per rule with its expected path and message; the examples pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli import main
from agent.platform.lint import WARNING, Problem, lint_documents, lint_file, lint_text

ROOT = Path(__file__).resolve().parents[3]
BROKEN = ROOT / "tests" / "fixtures" / "lint"
GOOD = [
    *sorted((ROOT / "config" / "examples").glob("*.yaml")),
    ROOT / "tests" / "fixtures" / "seed-vcjob.yaml",
    ROOT / "tests" / "fixtures" / "seed-acjob.yaml",
]
T0 = "spec.tasks[0].template"

# file stem, rule, field path, part of the message
CASES = [
    ("max-retry-below-retry-times", "max-retry-below-retry-times", "spec.maxRetry",
     "spec.maxRetry 2 is smaller than fault-retry-times 3"),
    ("max-retry-below-retry-times-acjob", "max-retry-below-retry-times", "spec.runPolicy.backoffLimit",
     "backoffLimit 1 is smaller than fault-retry-times 3"),
    ("retry-times-needs-never", "retry-times-needs-never", f"{T0}.spec.restartPolicy",
     "fault-retry-times needs restartPolicy: Never on task default-test, got 'OnFailure'"),
    ("retry-times-needs-never-acjob", "retry-times-needs-never", "spec.replicaSpecs.Worker.restartPolicy",
     "needs restartPolicy: Never on replica Worker, got None"),
    ("fault-scheduling-unknown", "fault-scheduling-unknown", "metadata.labels.fault-scheduling",
     "unknown fault-scheduling 'forced'; use one of force, grace, off"),
    ("fault-retry-times-invalid", "fault-retry-times-invalid", "metadata.labels.fault-retry-times",
     "fault-retry-times must be an integer 0–100, got '200'"),
    ("label-not-string", "label-not-string", "metadata.labels.fault-retry-times",
     "label values must be strings, got integer 3"),
    ("ring-controller-missing", "ring-controller-missing", "metadata.labels",
     "the job has no ring-controller.atlas label"),
    ("ring-controller-missing-template", "ring-controller-missing", f"{T0}.metadata.labels",
     "the pod template of task default-test has no ring-controller.atlas label"),
    ("ring-controller-mismatch", "ring-controller-mismatch", f"{T0}.metadata.labels.ring-controller.atlas",
     "'ascend-910' on task default-test but 'ascend-910b' on the job"),
    ("framework-invalid", "framework-invalid", "metadata.labels.framework", "needs a framework label"),
    ("framework-invalid-value", "framework-invalid", "metadata.labels.framework", "got 'jax'"),
    ("ascend-container-missing", "ascend-container-missing", "spec.replicaSpecs.Worker.template.spec.containers",
     "replica Worker has no container named 'ascend'"),
    ("rings-config-volume-wrong", "rings-config-volume-wrong", f"{T0}.spec.volumes[0].configMap.name",
     "points at ConfigMap 'rings-config-other-job', expected 'rings-config-mindx-dls-test'"),
    ("rings-config-volume-missing", "rings-config-volume-missing", f"{T0}.spec.volumes",
     "mounts no volume from ConfigMap 'rings-config-mindx-dls-test'"),
    ("npu-requests-not-limits", "npu-requests-not-limits", f"{T0}.spec.containers[0].resources",
     "NPU resource huawei.com/Ascend910: requests '4' must equal limits '8'"),
    ("double-restart", "double-restart", "spec.policies[1]",
     "PodFailed → RestartJob policy together with fault-retry-times restarts the job twice"),
    ("grace-over-time-label-ignored", "grace-over-time-label-ignored", "metadata.labels.grace-over-time",
     "it is a scheduler-wide setting"),
    ("grace-without-grace-period", "grace-without-grace-period", f"{T0}.spec.terminationGracePeriodSeconds",
     "terminationGracePeriodSeconds 0 on task default-test"),
    ("pod-rescheduling-invalid", "pod-rescheduling-invalid", "metadata.labels.pod-rescheduling",
     "must be 'on' or 'off', got 'yes'"),
    ("sub-healthy-strategy-invalid", "sub-healthy-strategy-invalid", "metadata.labels.subHealthyStrategy",
     "must be one of ignore, graceExit, forceExit, hotSwitch, got 'panic'"),
    ("scheduler-not-volcano", "scheduler-not-volcano", "spec.schedulerName",
     "schedulerName must be volcano, got 'default-scheduler'"),
    ("min-available-above-replicas", "min-available-above-replicas", "spec.minAvailable",
     "minAvailable 3 is more than the 2 pods"),
    ("anti-affinity-other-job", "anti-affinity-other-job",
     f"{T0}.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
     ".labelSelector.matchExpressions[0]",
     "expected volcano.sh/job-name in [mindx-dls-test]"),
    ("replica-type-unknown", "replica-type-unknown", "spec.replicaSpecs.Boss", "unknown replica type 'Boss'"),
    ("generate-name", "generate-name", "metadata.generateName", "use metadata.name, not generateName"),
    ("rings-config-namespace", "rings-config-namespace", "metadata.namespace",
     "is in namespace 'default' but the job in 'vcjob'"),
    ("rings-config-hccl-missing", "rings-config-hccl-missing", "data.hccl.json", "has no hccl.json key"),
    ("rings-config-hccl-invalid", "rings-config-hccl-invalid", "data.hccl.json",
     "must start as {\"status\": \"initializing\"}"),
    ("rings-config-label-missing", "rings-config-label-missing", "metadata.labels",
     "has no ring-controller.atlas label"),
    ("unsupported-kind", "unsupported-kind", "kind", "apps/v1 Deployment is not a Volcano Job"),
    ("several-jobs", "several-jobs", "", "one job per file, found 2"),
    ("no-pods", "no-pods", "spec.tasks", "the job has no pods"),
    ("yaml-invalid", "yaml-invalid", "line 5, column 1", "not valid YAML"),
    ("not-an-object", "not-an-object", "", "document is an array, expected a Kubernetes object"),
    ("no-job", "no-job", "", "the file holds no Volcano Job, AscendJob, JobSet or TrainJob"),
    ("name-invalid", "name-invalid", "metadata.name", "job name 'Bad_Name!' must be a DNS-1123 label"),
    ("not-fault-tolerant", "not-fault-tolerant", "metadata.labels",
     "neither a fault-scheduling nor a fault-retry-times label: the agent will not act on it"),
]  # fmt: skip


TIGHT = "max-retry-tight"
"""The warning for the guide's own maxRetry 3 = fault-retry-times 3, which most broken files copy."""


@pytest.mark.parametrize(("stem", "rule", "path", "message"), [pytest.param(*c, id=c[0]) for c in CASES])
def test_each_broken_file_has_exactly_its_problem(stem: str, rule: str, path: str, message: str) -> None:
    problems = [p for p in lint_file(BROKEN / f"{stem}.yaml") if p.rule != TIGHT]
    assert [(p.rule, p.path) for p in problems] == [(rule, path)], [str(p) for p in problems]
    assert message in problems[0].message


def test_grace_over_time_label_is_a_warning_pointing_at_the_agent_setting() -> None:
    """MindCluster reads grace-over-time from its scheduler plugin's arguments, never a job: the label is ignored."""
    (problem,) = [p for p in lint_file(BROKEN / "grace-over-time-label-ignored.yaml") if p.rule != TIGHT]
    assert problem.severity == WARNING
    assert "policy.grace_over_time_s" in problem.message
    assert "FAULT_AGENT_POLICY__GRACE_OVER_TIME_S" in problem.message


def test_every_broken_file_is_in_the_table() -> None:
    assert {p.stem for p in BROKEN.glob("*.yaml")} == {c[0] for c in CASES}


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in GOOD])
def test_examples_pass(path: Path) -> None:
    """No errors; the guide's job (kept with its maxRetry 3 = fault-retry-times 3) carries the budget warning."""
    problems = lint_file(path)
    assert [p for p in problems if p.is_error] == []
    guide = path.name in ("vcjob-mindx-dls-test.yaml", "seed-vcjob.yaml")
    assert [p.rule for p in problems] == ([TIGHT] if guide else [])


@pytest.mark.parametrize(
    ("max_retry", "retry_times", "warned"),
    [
        pytest.param("3", "3", True, id="guide-3-3"),
        pytest.param("4", "3", True, id="4-3-no-room-for-hardware"),
        pytest.param("5", "3", False, id="5-3-covers-both"),
        pytest.param("3", "1", False, id="3-1-covers-both"),
        pytest.param(None, "2", True, id="unset-is-volcano-default-3"),
        pytest.param("2", "3", False, id="below-is-the-error-instead"),
    ],
)
def test_max_retry_that_cannot_cover_retries_and_a_hardware_restart_warns(
    max_retry: str | None, retry_times: str, warned: bool
) -> None:
    text = _job("j", f"{{ring-controller.atlas: x, fault-retry-times: '{retry_times}'}}")
    text += f"spec: {{maxRetry: {max_retry}}}\n" if max_retry is not None else "spec: {schedulerName: volcano}\n"
    found = [p for p in lint_text(text) if p.rule == TIGHT]
    assert bool(found) is warned, [str(p) for p in lint_text(text)]
    for p in found:
        assert p.severity == WARNING
        assert p.path == "spec.maxRetry"
        shown = f"spec.maxRetry {max_retry}" if max_retry else "spec.maxRetry is unset and Volcano's default 3"
        assert f"{shown} with fault-retry-times {retry_times}" in p.message
        assert "marks the job Failed" in p.message


def test_cli_warns_about_the_guides_budget_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped guide job: maxRetry 3 = fault-retry-times 3 is allowed by the guide, so a warning that explains
    the consequence, exit code 0 (issue 13, C.9)."""
    path = ROOT / "config" / "examples" / "vcjob-mindx-dls-test.yaml"
    assert main(["lint", str(path)]) == 0
    out, err = capsys.readouterr()
    warning, ok = out.splitlines()
    assert warning.startswith(f"warning: {path} (document 2): spec.maxRetry: spec.maxRetry 3 with fault-retry-times 3")
    assert "survives 2 restart(s) in all" in warning
    assert "Set maxRetry to at least 5" in warning
    assert ok == f"{path}: ok"
    assert err == ""


@pytest.mark.parametrize(
    ("text", "rules"),
    [
        pytest.param("", ["no-job"], id="empty-file"),
        pytest.param("42\n", ["not-an-object"], id="scalar"),
        pytest.param(
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {labels: {ring-controller.atlas: x}}\n",
            ["name-missing", "not-fault-tolerant", "spec-missing"],
            id="job-without-name-and-spec",
        ),
        pytest.param(
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j, labels: [a]}\nspec: {tasks: []}\n",
            ["labels-not-mapping", "ring-controller-missing", "not-fault-tolerant", "no-pods"],
            id="labels-a-list",
        ),
        pytest.param(
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\n"
            "metadata: {name: j, labels: {ring-controller.atlas: x}}\n"
            "spec: {tasks: [{name: t, replicas: 1}]}\n",
            ["not-fault-tolerant", "template-missing", "rings-config-missing"],
            id="task-without-template",
        ),
        pytest.param(
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\n"
            "metadata: {name: j, labels: {ring-controller.atlas: x}}\n"
            "spec: {tasks: [{name: t, replicas: 1, template: {metadata: {labels: {ring-controller.atlas: x}}}}]}\n",
            ["not-fault-tolerant", "no-containers", "rings-config-volume-missing", "rings-config-missing"],
            id="template-without-containers",
        ),
        pytest.param(
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\n"
            "metadata: {name: j, labels: {ring-controller.atlas: x, fault-retry-times: '5'}}\n"
            "spec: {tasks: []}\n",
            ["no-pods", "max-retry-below-retry-times", "rings-config-missing"],
            id="default-max-retry-counts",
        ),
    ],
)
def test_odd_documents_get_specific_problems(text: str, rules: list[str]) -> None:
    assert [p.rule for p in lint_text(text, "x.yaml")] == rules


def test_default_max_retry_is_named_in_the_message() -> None:
    text = (
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\n"
        "metadata: {name: j, labels: {ring-controller.atlas: x, fault-retry-times: '5'}}\nspec: {tasks: []}\n"
    )
    messages = [p.message for p in lint_text(text)]
    assert "spec.maxRetry is unset and Volcano's default 3 is smaller than fault-retry-times 5" in messages[1]


def test_problem_text_names_file_document_path_and_rule() -> None:
    p = Problem("job.yaml", 2, "spec.maxRetry", "max-retry-below-retry-times", "too small")
    assert str(p) == "job.yaml (document 2): spec.maxRetry: too small [max-retry-below-retry-times]"


def test_lint_documents_accepts_parsed_objects() -> None:
    assert [p.rule for p in lint_documents([None, {"kind": "Pod", "apiVersion": "v1"}])] == ["unsupported-kind"]


def test_cli_prints_every_problem_and_exits_non_zero(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    code = main(["lint", str(BROKEN / "double-restart.yaml"), str(GOOD[0]), str(missing)])
    out, err = capsys.readouterr()
    assert code == 1
    assert "spec.policies[1]: a PodFailed → RestartJob policy" in out
    assert f"{GOOD[0]}: ok" in out
    assert f"{missing}: <document>: cannot read: No such file or directory [unreadable]" in out
    assert "2 problems found" in err


def test_cli_exits_zero_on_the_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", *map(str, GOOD)]) == 0
    assert capsys.readouterr().out.count(": ok") == len(GOOD)


def _job(name: str, labels: str = "{ring-controller.atlas: x, fault-scheduling: force}") -> str:
    return f"apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {{name: '{name}', labels: {labels}}}\n"


@pytest.mark.parametrize(
    ("name", "invalid"),
    [
        pytest.param("Bad_Name!", True, id="upper-underscore-bang"),
        pytest.param("Job", True, id="upper-case"),
        pytest.param("job.v1", True, id="dot"),
        pytest.param("-job", True, id="leading-dash"),
        pytest.param("job-", True, id="trailing-dash"),
        pytest.param("a" * 64, True, id="64-chars"),
        pytest.param("a" * 63, False, id="63-chars"),
        pytest.param("job-1", False, id="valid"),
        pytest.param("1", False, id="one-digit"),
    ],
)
def test_job_names_must_be_dns1123_labels(name: str, invalid: bool) -> None:
    rules = [p.rule for p in lint_text(_job(name))]
    assert ("name-invalid" in rules) is invalid, rules


@pytest.mark.parametrize(
    ("labels", "warned"),
    [
        pytest.param("{ring-controller.atlas: x}", True, id="neither"),
        pytest.param("{ring-controller.atlas: x, fault-scheduling: 'off'}", False, id="fault-scheduling"),
        pytest.param("{ring-controller.atlas: x, fault-retry-times: '1'}", False, id="fault-retry-times"),
    ],
)
def test_a_job_the_agent_ignores_gets_a_warning(labels: str, warned: bool) -> None:
    found = [p for p in lint_text(_job("j", labels)) if p.rule == "not-fault-tolerant"]
    assert bool(found) is warned
    assert all(p.severity == WARNING and not p.is_error for p in found)


def test_cli_prints_warnings_but_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    path = BROKEN / "not-fault-tolerant.yaml"
    assert main(["lint", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"warning: {path} (document 2): metadata.labels: the job has neither a fault-scheduling nor a "
        "fault-retry-times label: the agent will not act on it (no restart or rescheduling on a fault) "
        "[not-fault-tolerant]",
        f"{path}: ok",
    ]
    assert err == ""


def test_cli_help_explains_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["lint", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Lines starting with 'warning:' are warnings" in out
    assert "do not change the exit code" in out


@pytest.mark.parametrize("strategy", ["ignore", "graceExit", "forceExit", "hotSwitch"])
def test_every_mindcluster_sub_healthy_strategy_is_accepted(strategy: str) -> None:
    """MindCluster common/util/type.go subHealthyStrategs: ignore, graceExit, forceExit, hotSwitch."""
    broken = (BROKEN / "sub-healthy-strategy-invalid.yaml").read_text()
    text = broken.replace("subHealthyStrategy: panic", f"subHealthyStrategy: {strategy}")
    rules = [p.rule for p in lint_text(text, "job.yaml") if p.rule != TIGHT]
    # graceExit needs reset-config-<job>, which this file lacks: a warning (submit creates it)
    assert rules == (["reset-config-missing"] if strategy == "graceExit" else [])


_POD_LEVEL_JOB = (
    "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\n"
    "metadata: {name: j, namespace: ns,\n"
    "  labels: {ring-controller.atlas: x, fault-scheduling: force, pod-rescheduling: 'on'}}\n"
    "spec: {tasks: []}\n"
)


@pytest.mark.parametrize(
    ("extra", "rules"),
    [
        pytest.param("", ["no-pods", "rings-config-missing", "reset-config-missing"], id="missing"),
        pytest.param(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: reset-config-j, namespace: ns, labels: {reset: "
            "'true'}}\ndata: {reset.json: '{}'}\n",
            ["no-pods", "rings-config-missing"],
            id="present",
        ),
        pytest.param(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: reset-config-j, namespace: ns}\n"
            'data: {reset.json: \'{"RetryTime": "x"}\'}\n',
            ["no-pods", "rings-config-missing", "reset-config-label-missing", "reset-config-invalid"],
            id="broken",
        ),
    ],
)
def test_a_job_that_needs_a_reset_config_is_flagged_from_the_file_alone(extra: str, rules: list[str]) -> None:
    problems = lint_text(_POD_LEVEL_JOB + extra, "x.yaml")
    assert [p.rule for p in problems] == rules
    missing = [p for p in problems if p.rule == "reset-config-missing"]
    assert all(p.severity == "warning" and "fault-agent submit creates it" in p.message for p in missing)


@pytest.mark.parametrize(
    ("value", "invalid"),
    [
        pytest.param("3", False, id="digits"),
        pytest.param("0", False, id="zero"),
        pytest.param("100", False, id="upper-bound"),
        pytest.param("1_0", True, id="underscore"),  # a valid label value; Python's int() reads it as 10
        pytest.param("+3", True, id="plus-sign"),
        pytest.param(" 3", True, id="leading-space"),
        pytest.param("\u0663", True, id="arabic-indic-digit"),  # int() reads it as 3
        pytest.param("101", True, id="above-range"),
    ],
)
def test_fault_retry_times_is_checked_as_the_agent_reads_it(value: str, invalid: bool) -> None:
    # The agent reads fault-retry-times as ASCII decimal digits 0-100 (agent.sources.jobs.fault_retry_times_problem)
    # and gives any other value a business retry budget of 0: lint must not pass a value the agent refuses.
    labels = f"{{ring-controller.atlas: x, fault-scheduling: force, fault-retry-times: {value!r}}}"
    rules = [p.rule for p in lint_text(_job("j", labels))]
    assert ("fault-retry-times-invalid" in rules) is invalid, rules


def test_a_job_without_its_rings_config_is_warned_from_the_file_alone() -> None:
    """Issue 41, 8: lint said ok for a job whose rings-config ConfigMap the file lacks (kubectl apply of it starts
    pods that wait for a ConfigMap nobody makes); a warning now, naming what submit does."""
    problems = [p for p in lint_text(_POD_LEVEL_JOB, "x.yaml") if p.rule == "rings-config-missing"]
    assert len(problems) == 1
    assert problems[0].severity == WARNING
    assert "rings-config-j" in problems[0].message
    assert "fault-agent submit creates it" in problems[0].message
