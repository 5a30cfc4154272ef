"""The Prometheus progress source: every ``prometheus.interval_s``, each job labelled
``fault-agent.io/progress: prometheus`` has its queries evaluated (agent.sources.prometheus) and the answers
turned into readings (agent.core.progress_prom) that the detect pipeline's hang detector follows exactly as it
follows heartbeat Leases (same timeout rule, same ``job.hung`` and ``recovery.resumed`` events).

A round that gets no usable reading for a job (Prometheus unreachable, a bad query, no or several series, a bad
value) reports the problem once, counted in ``fault_agent_input_rejected_total``, and makes the detector restart
that job's idle time (HangDetector.blind): no data is never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

import structlog

from agent.core.cluster import JobRecord
from agent.core.detect.common import DetectResult
from agent.core.faults import ObjectRef, Rejection
from agent.core.progress import PROGRESS_LABEL, PROGRESS_PROMETHEUS
from agent.core.progress_prom import PrometheusProgress, Unanswered, job_queries, reading_key
from agent.engine.detecting import DetectPipeline
from agent.settings import PrometheusSettings
from agent.sources.prometheus import PrometheusClient
from agent.sources.state import ClusterState

log = structlog.get_logger(__name__)


class Querier(Protocol):
    async def query(self, expr: str) -> Any | Unanswered: ...


class PrometheusProgressSource:
    """Evaluates the opted-in jobs' queries in rounds and feeds the readings to `pipeline`'s hang detector.

    Args:
        settings: the ``prometheus`` settings (``url`` empty: every opted-in job is reported once,
            ``no-prometheus-url``, and none is followed).
        state: the cluster state (its Volcano Jobs and AscendJobs).
        pipeline: the detect pipeline (its clock, its hang detector, its counted emit).
    """

    def __init__(self, settings: PrometheusSettings, state: ClusterState, pipeline: DetectPipeline) -> None:
        self.settings = settings
        self.state = state
        self.pipeline = pipeline
        self.progress = PrometheusProgress(settings.interval_s)
        self.followed: set[str] = set()  # detector keys fed by this source
        self.rounds = 0

    def jobs(self) -> list[JobRecord]:
        """The jobs labelled ``fault-agent.io/progress: prometheus``."""
        jobs = [j for store in self.state.job_stores() for j in store.values()]
        return [j for j in jobs if j.label(PROGRESS_LABEL) == PROGRESS_PROMETHEUS]

    def running(self, job: JobRecord) -> bool:
        """`job` has a Running pod. One that has none is not queried (no training to follow, and no ``no-series``
        report while it waits, restarts or after it ended); it stays followed, so its restart is still seen."""
        return any(p.phase == "Running" for p in self.state.pods_of_job(job.kind, job.namespace, job.name))

    async def run(self, stop: asyncio.Event) -> None:
        """Rounds every ``interval_s`` until `stop` (the first once the state has listed)."""
        while not self.state.ready and not stop.is_set():  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        clock = self.pipeline.clock
        async with PrometheusClient(self.settings) as client:
            while not stop.is_set():
                started = clock.monotonic()
                try:
                    await self.round(client)
                except Exception:  # last resort of the prometheus-progress task: logged, the next round tries again
                    log.exception("prometheus progress round failed")
                wait = max(0.0, self.settings.interval_s - (clock.monotonic() - started))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)

    async def round(self, client: Querier) -> None:
        """One evaluation of every opted-in job's queries (at most ``concurrency`` at once)."""
        self.rounds += 1
        jobs = self.jobs()
        keys = {reading_key(j.namespace, j.name) for j in jobs}
        detector = self.pipeline.hang
        for key in self.followed - keys:  # gone or no longer opted in: forgotten (a hang it had is cleared)
            self.pipeline.emit_progress(detector.delete(key, self.pipeline.clock.now()))
        self.followed &= keys
        self.progress.forget({j.uid for j in jobs})
        if not self.settings.url:
            for job in jobs:
                ref = ObjectRef(job.kind.api_kind, job.namespace, job.name, job.uid)
                detail = "the job follows Prometheus but prometheus.url is empty: its progress is not followed"
                self._report(self.progress.job_problem(Rejection(ref, "no-prometheus-url", detail), job.uid))
            return
        gate = asyncio.Semaphore(self.settings.concurrency)

        async def one(job: JobRecord) -> None:
            async with gate:
                try:
                    await self._evaluate(client, job)
                except Exception:  # last resort of one job's evaluation: its bug must not end the others' round
                    log.exception("prometheus progress evaluation failed", job=f"{job.namespace}/{job.name}")

        async with asyncio.TaskGroup() as tg:
            for job in jobs:
                if self.running(job):
                    tg.create_task(one(job))

    async def _evaluate(self, client: Querier, job: JobRecord) -> None:
        s = self.settings
        key = reading_key(job.namespace, job.name)
        detector = self.pipeline.hang
        queries = job_queries(job, s.step_query, s.step_time_query, s.job_queries)
        if isinstance(queries, Rejection):
            self._report(self.progress.job_problem(queries, job.uid))
            detector.blind(key, self.pipeline.clock.now())
            return
        step_answer = await client.query(queries.step)
        time_answer = None
        if queries.step_time is not None and not isinstance(step_answer, Unanswered):
            time_answer = await client.query(queries.step_time)
        now = self.pipeline.clock.now()
        failed = next((a for a in (step_answer, time_answer) if isinstance(a, Unanswered)), None)
        if failed is not None:
            self._report(self.progress.unanswered(failed))
            detector.blind(key, now)
            return
        if self.progress.answered():
            log.warning("Prometheus answers again: progress followed again", url=s.url)
        got, problem = self.progress.reading(job, step_answer, time_answer)
        self._report(problem)
        if got is None:
            detector.blind(key, now)
            return
        self.followed.add(key)
        self.pipeline.emit_progress(detector.observe(got[0], got[1], now))
        self.pipeline.progress.observe(job.namespace, job.name, got[1], now)  # the effective-training account

    def _report(self, rejection: Rejection | None) -> None:
        if rejection is not None:
            self.pipeline.emit_progress(DetectResult(rejections=[rejection]))
