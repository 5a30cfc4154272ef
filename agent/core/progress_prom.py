"""Training progress read from Prometheus: a PromQL query per job, its answer turned into the readings the hang
detector (agent.core.progress.HangDetector) follows. Pure: no I/O, no clock reads.

A job opts in with the label ``fault-agent.io/progress: prometheus``. Its step query is the job's annotation
:data:`QUERY_ANNOTATION` (a label value cannot hold PromQL) when ``prometheus.job_queries`` allows it, else the
setting ``prometheus.step_query``; the optional step-time query likewise (:data:`STEP_TIME_QUERY_ANNOTATION`,
``prometheus.step_time_query``). In a query, ``{namespace}`` and ``{job}`` are replaced by the job's namespace and
name (plain text replacement: PromQL's own braces stay as written; both are DNS names, so they need no escaping
inside a quoted label matcher). The query must give one number: a scalar, or an instant vector of exactly one
series (aggregate with ``max(...)`` when the counter is exported by more than one pod).

The answer is read as Prometheus' HTTP API gives it (``GET /api/v1/query``; its documented JSON envelope
``{"status": "success", "data": {"resultType": ..., "result": ...}}``, errors as ``status: error`` with
``errorType`` and ``error``). A step is a non-negative integer value (a fractional or negative one is rejected:
the query does not read a step counter); a step time a finite positive number of seconds.

No data is never a hang: an evaluation that gives no usable reading (Prometheus unreachable or failing, a bad
query, no series, several series, a bad value) reports its problem once and makes the detector restart the job's
idle time (HangDetector.blind), so a hang needs a whole timeout of answered readings that all show the same step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.core.cluster import JobRecord
from agent.core.faults import ObjectRef, Rejection
from agent.core.progress import PROMETHEUS_SOURCE_KIND, Progress

QUERY_ANNOTATION = "fault-agent.io/progress-query"
"""Job annotation: the PromQL template of the job's last completed training step."""
STEP_TIME_QUERY_ANNOTATION = "fault-agent.io/progress-step-time-query"
"""Job annotation (optional): the PromQL template of the job's recent seconds per step."""
PLACEHOLDERS = ("{namespace}", "{job}")
"""What a template may contain in place of the job's namespace and name."""
MAX_QUERY_CHARS = 4000
"""A longer query is rejected (``bad-progress-query``): far beyond any step query, and kept out of URLs."""
_MAX_STEP = 2**63 - 1

PROMETHEUS_REF = ObjectRef("Prometheus", "", "prometheus")
"""The source of the rejections about Prometheus itself (``fault_agent_input_rejected_total{source="Prometheus"}``)."""


def reading_key(namespace: str, job: str) -> str:
    """The hang detector's key of a job's Prometheus reading (``<namespace>/PrometheusQuery:<job>``; a Lease name
    cannot hold a colon, so it never meets a Lease's key)."""
    return f"{namespace}/{PROMETHEUS_SOURCE_KIND}:{job}"


@dataclass(frozen=True, slots=True)
class PrometheusReading:
    """A job's progress source when read from Prometheus (agent.core.progress.ProgressSource).

    `uid`: the job's UID; `duration_s`: the longest gap between fresh readings the agent expects (three
    evaluation intervals), a lower bound of the hang timeout as a Lease's ``leaseDurationSeconds`` is."""

    namespace: str
    job: str
    uid: str
    duration_s: int | None
    holder: str = ""

    @property
    def key(self) -> str:
        return reading_key(self.namespace, self.job)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(PROMETHEUS_SOURCE_KIND, self.namespace, self.job, self.uid)


@dataclass(frozen=True, slots=True)
class JobQueries:
    """The queries of one job, placeholders replaced: `step` (required), `step_time` (None: not asked), and where
    they came from (``annotation`` or ``settings``)."""

    step: str
    step_time: str | None
    origin: str


def render(template: str, job: JobRecord) -> str:
    """`template` with :data:`PLACEHOLDERS` replaced by `job`'s namespace and name."""
    return template.replace("{namespace}", job.namespace).replace("{job}", job.name)


def job_queries(job: JobRecord, step_query: str, step_time_query: str, job_queries: bool) -> JobQueries | Rejection:
    """The queries to evaluate for `job` (opted in with ``fault-agent.io/progress: prometheus``).

    `step_query`, `step_time_query`: the settings' templates ("" = none); `job_queries`: whether the job's own
    annotations may replace them. Rejection (source: the job) reasons: ``no-progress-query`` (no annotation
    allowed and no setting), ``bad-progress-query`` (empty, over :data:`MAX_QUERY_CHARS`, or with a control
    character), ``job-queries-off`` (the job has a query annotation that ``prometheus.job_queries: false`` does not
    allow, and no setting stands in)."""
    ref = ObjectRef(job.kind.api_kind, job.namespace, job.name, job.uid)
    own = job.annotation(QUERY_ANNOTATION)
    own_time = job.annotation(STEP_TIME_QUERY_ANNOTATION)
    if own is not None and job_queries:
        step, step_time, origin = own, own_time, "annotation"
    elif step_query:
        step, step_time, origin = step_query, step_time_query or None, "settings"
    elif own is not None:
        return Rejection(ref, "job-queries-off", f"{QUERY_ANNOTATION} is set but prometheus.job_queries is false, and "
                         "prometheus.step_query is empty: the job's progress is not followed")  # fmt: skip
    else:
        return Rejection(ref, "no-progress-query", f"no {QUERY_ANNOTATION} annotation and no prometheus.step_query "
                         "setting: the job's progress is not followed")  # fmt: skip
    for what, text in (("step", step), ("step time", step_time)):
        if text is None:
            continue
        problem = _query_problem(text)
        if problem is not None:
            return Rejection(ref, "bad-progress-query", f"the {what} query ({origin}) {problem}")
    return JobQueries(render(step, job), render(step_time, job) if step_time else None, origin)


def _query_problem(text: str) -> str | None:
    if not text.strip():
        return "is empty"
    if len(text) > MAX_QUERY_CHARS:
        return f"is longer than {MAX_QUERY_CHARS} characters"
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return "holds a control character"
    return None


@dataclass(frozen=True, slots=True)
class Unanswered:
    """An evaluation that gave no answer to read: `reason` ``prometheus-unreachable`` (connection refused, reset,
    timed out, DNS, TLS), ``prometheus-http-error`` (an HTTP status without Prometheus' JSON envelope: a proxy's
    5xx, 401/403), and `detail` for the log line."""

    reason: str
    detail: str


def read_value(body: Any) -> float | tuple[str, str]:
    """The one number in an instant query's answer `body` (the decoded JSON of ``/api/v1/query``), or
    (reason, detail) when there is none.

    Reasons: ``bad-progress-query`` (``status: error`` with ``errorType`` ``bad_data``: the query does not parse
    or is not allowed), ``progress-query-failed`` (another ``status: error``: a timeout, a cancelled or failed
    evaluation), ``bad-prometheus-answer`` (not the API's envelope), ``bad-result-type`` (a matrix or a string),
    ``no-series`` (an empty vector: nothing exported, or the series went stale), ``many-series`` (more than one
    series), ``bad-sample`` (a value that is not a number)."""
    if not isinstance(body, Mapping):
        return "bad-prometheus-answer", f"the answer is a {type(body).__name__}, not a JSON object"
    status = body.get("status")
    if status == "error":
        kind, error = str(body.get("errorType", ""))[:40], str(body.get("error", ""))[:300]
        reason = "bad-progress-query" if kind == "bad_data" else "progress-query-failed"
        return reason, f"Prometheus answered {kind or 'an error'}: {error}"
    data = body.get("data")
    if status != "success" or not isinstance(data, Mapping):
        return "bad-prometheus-answer", f"status {str(status)[:40]!r} without a data object"
    result_type = data.get("resultType")
    result = data.get("result")
    if result_type == "scalar":
        sample: Any = result
    elif result_type == "vector":
        if not isinstance(result, list):
            return "bad-prometheus-answer", "a vector whose result is not a list"
        if not result:
            return "no-series", "the query gave no series (nothing exported, or the series went stale)"
        if len(result) > 1:
            labels = [s.get("metric") for s in result[:3] if isinstance(s, Mapping)]
            return "many-series", f"the query gave {len(result)} series (e.g. {labels}); aggregate it to one"
        sample = result[0].get("value") if isinstance(result[0], Mapping) else None
    else:
        return "bad-result-type", f"the query gave a {str(result_type)[:40]}, not a scalar or an instant vector"
    if not isinstance(sample, list) or len(sample) != 2 or not isinstance(sample[1], str):
        return "bad-prometheus-answer", f"a sample that is not [time, text]: {str(sample)[:80]}"
    try:
        return float(sample[1])
    except ValueError:
        return "bad-sample", f"the value {sample[1][:40]!r} is not a number"


def step_of(value: float) -> int | None:
    """`value` as a step: a non-negative integer (as Prometheus gives it, a float such as ``1234``), else None."""
    if not math.isfinite(value) or value < 0 or value != math.floor(value) or value > _MAX_STEP:
        return None
    return int(value)


@dataclass
class PrometheusProgress:
    """Turns one evaluation round's answers into progress readings and once-reported problems.

    Use: per round, :meth:`reading` for each evaluated job (its answers), :meth:`unanswered` for a job whose
    evaluation got no answer, :meth:`answered` when Prometheus answered anything this round. Problems are reported
    once: a job's once per reason (again after a good reading), Prometheus' own once per outage (again after an
    answer).

    Args:
        interval_s: seconds between evaluations; a reading promises a fresh one within three of them
            (:attr:`PrometheusReading.duration_s`).
    """

    interval_s: float
    reported: dict[str, str] = field(default_factory=dict)  # job UID -> the last problem reported
    outage: str | None = None  # the Prometheus problem reported and not yet over

    def reading(
        self, job: JobRecord, step_answer: Any, step_time_answer: Any | None
    ) -> tuple[tuple[PrometheusReading, Progress] | None, Rejection | None]:
        """The reading of `job` from its answers (the decoded ``/api/v1/query`` bodies; `step_time_answer` None:
        no step-time query) and a problem to report. None for the reading: the step answer is unusable. A problem
        is returned the first time it is seen for the job (source: the job; the reasons of :func:`read_value`,
        and ``bad-step``, ``bad-step-time``), None after that. A step-time answer without a usable value is
        reported, and the step is still used (without a step time: the timeout falls back as for a Lease)."""
        ref = ObjectRef(job.kind.api_kind, job.namespace, job.name, job.uid)
        got = read_value(step_answer)
        if isinstance(got, tuple):
            return None, self._once(ref, got[0], f"step query: {got[1]}")
        step = step_of(got)
        if step is None:
            return None, self._once(ref, "bad-step", f"step query: {got!r} is not a non-negative integer step")
        step_time: float | None = None
        problem: Rejection | None = None
        if step_time_answer is not None:
            value = read_value(step_time_answer)
            if isinstance(value, tuple):
                problem = self._once(ref, value[0], f"step-time query: {value[1]}")
            elif not math.isfinite(value) or value <= 0:
                problem = self._once(ref, "bad-step-time", f"step-time query: {value!r} is not a positive number")
            else:
                step_time = value
                self.reported.pop(job.uid, None)
        else:
            self.reported.pop(job.uid, None)
        reading = PrometheusReading(job.namespace, job.name, job.uid, math.ceil(3 * self.interval_s))
        return (reading, Progress(step, step_time, None, False)), problem

    def job_problem(self, rejection: Rejection, uid: str) -> Rejection | None:
        """`rejection` (about the job of UID `uid`) the first time it is seen, None after that."""
        return self._once(rejection.source, rejection.reason, rejection.detail, uid)

    def unanswered(self, failure: Unanswered) -> Rejection | None:
        """Prometheus gave no answer: reported once per outage (source :data:`PROMETHEUS_REF`), None after."""
        if self.outage is not None:
            return None
        self.outage = failure.reason
        return Rejection(PROMETHEUS_REF, failure.reason, failure.detail)

    def answered(self) -> bool:
        """Prometheus answered: an outage (if any) is over. True when one was."""
        over, self.outage = self.outage is not None, None
        return over

    def forget(self, uids: set[str]) -> None:
        """Drop what was reported about the jobs not in `uids` (gone, or no longer opted in)."""
        for uid in [u for u in self.reported if u not in uids]:
            del self.reported[uid]

    def _once(self, ref: ObjectRef, reason: str, detail: str, uid: str | None = None) -> Rejection | None:
        key = uid if uid is not None else ref.uid
        if self.reported.get(key) == reason:
            return None
        self.reported[key] = reason
        return Rejection(ref, reason, detail)
