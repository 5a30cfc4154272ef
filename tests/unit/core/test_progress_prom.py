"""Training progress read from Prometheus (agent.core.progress_prom) and the hang rule fed by it: pure, the clock
passed in. The answers are Prometheus' HTTP API envelopes as documented (/api/v1/query); the e2e test
tests/e2e/test_progress_prometheus.py reads them from the real server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from support.factories import FORCE, T0, job, pod

from agent.core.faults import Rejection
from agent.core.progress import (
    HANG_TIMEOUT_LABEL,
    PROGRESS_LABEL,
    HangDetector,
    HangSettings,
    Progress,
    SignalCheck,
    is_hang,
    progress_label_problem,
)
from agent.core.progress_prom import (
    QUERY_ANNOTATION,
    STEP_TIME_QUERY_ANNOTATION,
    JobQueries,
    PrometheusProgress,
    PrometheusReading,
    Unanswered,
    job_queries,
    read_value,
    reading_key,
    step_of,
)

SETTINGS = HangSettings(floor_s=60, ceiling_s=1800, step_time_multiple=10, checkpoint_max_s=3600)


def vector(*values: str) -> dict[str, Any]:
    result = [{"metric": {"pod": f"p{i}"}, "value": [1700000000.5, v]} for i, v in enumerate(values)]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(vector("1234"), 1234.0, id="one-series"),
        pytest.param({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "7"]}}, 7.0, id="scalar"),
        pytest.param(vector(), "no-series", id="empty-vector"),
        pytest.param(vector("1", "2"), "many-series", id="two-series"),
        pytest.param(vector("many"), "bad-sample", id="text-value"),
        pytest.param(
            {"status": "success", "data": {"resultType": "matrix", "result": []}}, "bad-result-type", id="range-vector"
        ),
        pytest.param(
            {"status": "success", "data": {"resultType": "string", "result": [1, "x"]}}, "bad-result-type", id="string"
        ),
        pytest.param(
            {"status": "error", "errorType": "bad_data", "error": "parse error"}, "bad-progress-query", id="parse-error"
        ),
        pytest.param(
            {"status": "error", "errorType": "timeout", "error": "query timed out"},
            "progress-query-failed",
            id="query-timeout",
        ),
        pytest.param({"status": "success"}, "bad-prometheus-answer", id="no-data"),
        pytest.param([1, 2], "bad-prometheus-answer", id="not-an-object"),
        pytest.param(
            {"status": "success", "data": {"resultType": "vector", "result": [{"value": 3}]}},
            "bad-prometheus-answer",
            id="bad-sample-shape",
        ),
    ],
)
def test_read_value(body: Any, expected: float | str) -> None:
    got = read_value(body)
    if isinstance(expected, str):
        assert isinstance(got, tuple)
        assert got[0] == expected
        assert got[1]
    else:
        assert got == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(12.0, 12), (0.0, 0), (1.5, None), (-1.0, None), (float("nan"), None), (float("inf"), None), (1e30, None)],
)
def test_step_of(value: float, expected: int | None) -> None:
    assert step_of(value) == expected


STEP = 'max(training_step{namespace="{namespace}",job_name="{job}"})'
STEP_TIME = 'max(training_step_seconds{namespace="{namespace}",job_name="{job}"})'


def prom_job(**annotations: str):
    return job("train", namespace="team-a", labels={**dict(FORCE), PROGRESS_LABEL: "prometheus"},
               annotations=annotations, fault_retry_times=3)  # fmt: skip


@pytest.mark.parametrize(
    ("annotations", "step_query", "allowed", "expected"),
    [
        pytest.param(
            {},
            STEP,
            True,
            JobQueries(
                'max(training_step{namespace="team-a",job_name="train"})',
                'max(training_step_seconds{namespace="team-a",job_name="train"})',
                "settings",
            ),
            id="settings-template",
        ),
        pytest.param(
            {QUERY_ANNOTATION: 'max(steps_total{job="{job}"})'},
            STEP,
            True,
            JobQueries('max(steps_total{job="train"})', None, "annotation"),
            id="annotation-wins",
        ),
        pytest.param(
            {QUERY_ANNOTATION: "x{a='{job}'}", STEP_TIME_QUERY_ANNOTATION: "y{a='{namespace}'}"},
            "",
            True,
            JobQueries("x{a='train'}", "y{a='team-a'}", "annotation"),
            id="annotation-step-time",
        ),
        pytest.param(
            {QUERY_ANNOTATION: "evil"},
            STEP,
            False,
            JobQueries(
                'max(training_step{namespace="team-a",job_name="train"})',
                'max(training_step_seconds{namespace="team-a",job_name="train"})',
                "settings",
            ),
            id="job-queries-off-settings-stand-in",
        ),
        pytest.param({QUERY_ANNOTATION: "x"}, "", False, "job-queries-off", id="job-queries-off-nothing-else"),
        pytest.param({}, "", True, "no-progress-query", id="no-query"),
        pytest.param({QUERY_ANNOTATION: "  "}, STEP, True, "bad-progress-query", id="blank-annotation"),
        pytest.param({QUERY_ANNOTATION: "x\x00"}, STEP, True, "bad-progress-query", id="control-character"),
        pytest.param({QUERY_ANNOTATION: "x" * 4001}, STEP, True, "bad-progress-query", id="too-long"),
    ],
)
def test_job_queries(annotations: dict[str, str], step_query: str, allowed: bool, expected: Any) -> None:
    got = job_queries(prom_job(**annotations), step_query, STEP_TIME, allowed)
    if isinstance(expected, str):
        assert isinstance(got, Rejection)
        assert (got.reason, got.source.kind, got.source.name) == (expected, "Job", "train")
    else:
        assert got == expected


def test_problems_are_reported_once_per_reason_and_again_after_a_good_reading() -> None:
    p = PrometheusProgress(interval_s=10)
    j = prom_job()
    got, problem = p.reading(j, vector(), None)
    assert got is None
    assert problem is not None
    assert problem.reason == "no-series"
    assert p.reading(j, vector(), None) == (None, None)  # said once
    got, problem = p.reading(j, vector("1", "2"), None)
    assert problem is not None
    assert problem.reason == "many-series"  # another reason: said
    got, problem = p.reading(j, vector("1.5"), None)
    assert problem is not None
    assert problem.reason == "bad-step"
    got, problem = p.reading(j, vector("40"), vector("2.5"))
    assert problem is None
    assert got == (PrometheusReading("team-a", "train", j.uid, 30), Progress(40, 2.5, None, False))
    assert got[0].key == reading_key("team-a", "train")
    assert got[0].ref.kind == "PrometheusQuery"
    _, problem = p.reading(j, vector(), None)
    assert problem is not None  # again after the good reading
    got, problem = p.reading(j, vector("41"), vector("-1"))
    assert got is not None
    assert got[1] == Progress(41, None, None, False)  # the step is used without the bad step time
    assert problem is not None
    assert problem.reason == "bad-step-time"


def test_an_outage_is_reported_once_and_again_after_an_answer() -> None:
    p = PrometheusProgress(interval_s=10)
    first = p.unanswered(Unanswered("prometheus-unreachable", "refused"))
    assert first is not None
    assert (first.source.kind, first.reason) == ("Prometheus", "prometheus-unreachable")
    assert p.unanswered(Unanswered("prometheus-http-error", "502")) is None
    assert p.answered() is True
    assert p.answered() is False
    assert p.unanswered(Unanswered("prometheus-unreachable", "refused")) is not None


class Cluster:
    def __init__(self, job: Any, pods: list[Any]) -> None:
        self.job, self.pods = job, pods

    def __call__(self, namespace: str, name: str) -> tuple[Any, list[Any]]:
        return (self.job, self.pods) if self.job is not None and name == self.job.name else (None, [])


def at(s: float) -> Any:
    return T0 + timedelta(seconds=s)


def _reading(step: int) -> tuple[PrometheusReading, Progress]:
    return PrometheusReading("team-a", "train", "uid-train", 3), Progress(step, None, None, False)


def test_a_prometheus_job_whose_step_stops_is_hung_like_a_lease_job() -> None:
    d = HangDetector(SETTINGS)
    j = prom_job()
    cluster = Cluster(job("train", namespace="team-a", labels={**dict(FORCE), PROGRESS_LABEL: "prometheus",
                                                              HANG_TIMEOUT_LABEL: "100"}),
                      [pod("train-0", rank=0, node="n1", namespace="team-a", job="train")])  # fmt: skip
    assert j.label(PROGRESS_LABEL) == "prometheus"
    d.observe(*_reading(10), at(0))
    d.tick(at(1), cluster)
    d.observe(*_reading(11), at(2))
    for s in range(10, 102, 10):
        d.observe(*_reading(11), at(s))  # answered readings, all the same step
    assert d.tick(at(101), cluster)[0].faults == []
    found, hangs = d.tick(at(102), cluster)
    [fault] = found.faults
    assert is_hang(fault)
    assert fault.source.kind == "PrometheusQuery"
    assert fault.pod is not None
    assert fault.pod.name == "train-0"
    assert [h.step for h in hangs] == [11]


def test_a_gap_in_the_readings_is_never_a_hang() -> None:
    """Regression: without HangDetector.blind a Prometheus outage longer than the timeout read as a stall."""
    d = HangDetector(SETTINGS)
    cluster = Cluster(job("train", namespace="team-a", labels={**dict(FORCE), PROGRESS_LABEL: "prometheus",
                                                              HANG_TIMEOUT_LABEL: "100"}),
                      [pod("train-0", rank=0, namespace="team-a", job="train")])  # fmt: skip
    key = reading_key("team-a", "train")
    d.observe(*_reading(10), at(0))
    d.tick(at(1), cluster)
    d.observe(*_reading(11), at(2))  # armed
    for s in range(10, 300, 10):  # Prometheus unreachable for ~5 minutes
        d.blind(key, at(s))
        assert d.tick(at(s + 1), cluster)[0].faults == []
    d.observe(*_reading(11), at(300))  # back, same step (no step seen move during the gap)
    assert d.tick(at(389), cluster)[0].faults == []  # a whole timeout since the last gap (at 290) is not over
    assert len(d.tick(at(391), cluster)[0].faults) == 1  # … and then it is: a real stall is still caught


def test_a_reading_of_another_signal_than_the_jobs_label_is_not_followed() -> None:
    d = HangDetector(SETTINGS)
    cluster = Cluster(job("train", namespace="team-a", labels={**dict(FORCE), PROGRESS_LABEL: "lease",
                                                              HANG_TIMEOUT_LABEL: "100"}),
                      [pod("train-0", rank=0, namespace="team-a", job="train")])  # fmt: skip
    d.observe(*_reading(10), at(0))
    d.tick(at(1), cluster)
    d.observe(*_reading(11), at(2))
    assert d.tick(at(500), cluster)[0].faults == []


def test_the_prometheus_label_is_a_known_signal_without_a_heartbeat_lease() -> None:
    assert progress_label_problem("prometheus") is None
    assert progress_label_problem("lease") is None
    assert progress_label_problem("kafka") is not None
    check = SignalCheck(grace_s=10)
    j = prom_job()
    running = [pod("train-0", namespace="team-a", job="train", created_at=T0)]
    assert check.check([j], lambda _: running, set(), at(1000)) == []  # no Lease expected of it
