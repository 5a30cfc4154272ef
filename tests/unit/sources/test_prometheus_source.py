"""The Prometheus progress source's edges: the HTTP client (agent.sources.prometheus) against a loopback HTTP
server answering as Prometheus' API does, and the rounds (agent.engine.progress_prometheus) through the real detect
pipeline and cluster state, with the answers given per query."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web
from support import factories
from support.factories import change

from agent.core.clock import FixedClock
from agent.core.faults import Fault, FaultCleared
from agent.core.progress import HANG_TIMEOUT_LABEL, PROGRESS_LABEL, is_hang
from agent.core.progress_prom import Unanswered, reading_key
from agent.engine.detecting import DetectPipeline
from agent.engine.progress_prometheus import PrometheusProgressSource
from agent.settings import PrometheusSettings, Settings
from agent.sources.prometheus import PrometheusClient
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
QUERY = 'max(training_step{namespace="{namespace}",job_name="{job}"})'
JOB_QUERY = 'max(training_step{namespace="ns",job_name="job"})'


def vector(value: str) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1.0, value]}]}}


# --- the client ---------------------------------------------------------------------------------------------


async def _serve(handler: Any) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/api/v1/query", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


async def test_the_client_returns_prometheus_answers_and_names_what_is_no_answer(tmp_path: Path) -> None:
    seen: list[tuple[str, str, str | None]] = []
    token = tmp_path / "token"
    token.write_text("first\n")

    async def handler(request: web.Request) -> web.StreamResponse:
        query = request.query["query"]
        seen.append((query, request.query["timeout"], request.headers.get("Authorization")))
        if query == "ok":
            return web.json_response(vector("42"))
        if query == "bad":  # as Prometheus answers a parse error
            return web.json_response({"status": "error", "errorType": "bad_data", "error": "parse error"}, status=400)
        if query == "proxy":
            return web.Response(status=502, text="<html>Bad Gateway</html>")
        if query == "down":
            return web.json_response({"status": "error", "errorType": "unavailable", "error": "TSDB not ready"},
                                     status=503)  # fmt: skip
        await asyncio.sleep(2)
        return web.json_response(vector("1"))

    runner, url = await _serve(handler)
    try:
        settings = PrometheusSettings(url=url, timeout_s=0.5, bearer_token_file=str(token))
        async with PrometheusClient(settings) as client:
            assert await client.query("ok") == vector("42")
            assert seen[-1] == ("ok", "0.5", "Bearer first")
            token.write_text("rotated")
            bad = await client.query("bad")
            assert bad["errorType"] == "bad_data"  # Prometheus' own error: the pure reader names it
            assert seen[-1][2] == "Bearer rotated"  # the token file is read at every query
            proxy = await client.query("proxy")
            assert isinstance(proxy, Unanswered)
            assert proxy.reason == "prometheus-http-error"
            assert "502" in proxy.detail
            down = await client.query("down")
            assert isinstance(down, Unanswered)
            assert down.reason == "prometheus-unreachable"
            slow = await client.query("slow")
            assert isinstance(slow, Unanswered)
            assert slow.reason == "prometheus-unreachable"
            token.unlink()
            no_token = await client.query("ok")
            assert isinstance(no_token, Unanswered)
            assert no_token.reason == "prometheus-unreachable"
    finally:
        await runner.cleanup()
    async with PrometheusClient(PrometheusSettings(url=url, timeout_s=0.5)) as client:
        refused = await client.query("ok")  # the server is gone
    assert isinstance(refused, Unanswered)
    assert refused.reason == "prometheus-unreachable"


# --- the rounds ---------------------------------------------------------------------------------------------


class Answers:
    """The querier: each query's answer now (a body, or an Unanswered)."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.asked: list[str] = []

    async def query(self, expr: str) -> Any:
        self.asked.append(expr)
        return self.answers[expr]


class Harness:
    def __init__(self, labels: dict[str, str], **prometheus: Any) -> None:
        self.clock = FixedClock(NOW)
        self.state = ClusterState()
        self.queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
        settings = Settings.model_validate({"kafka": {"enabled": False}})
        self.pipeline = DetectPipeline(settings, self.state, self.queue, clock=self.clock)
        self.source = PrometheusProgressSource(
            PrometheusSettings(
                **{"url": "http://prometheus:9090", "step_query": QUERY, "interval_s": 10, **prometheus}
            ),
            self.state,
            self.pipeline,
        )
        self.answers = Answers()
        self.apply(change("nodes", "n1", factories.node("n1", at=NOW)))
        self.label(labels)
        self.apply(change("pods", "ns/job-0", factories.pod("job-0", node="n1", rank=0, created_at=NOW)))

    def label(self, labels: dict[str, str]) -> None:
        job = factories.job(labels={"fault-scheduling": "force", **labels}, fault_retry_times=3, created_at=NOW)
        self.apply(change("vcjobs", "ns/job", job))

    def apply(self, c: object) -> None:
        self.state.apply(c)  # type: ignore[arg-type]
        self.pipeline(c)  # type: ignore[arg-type]

    async def round(self, seconds: float, answer: Any) -> list[Fault | FaultCleared]:
        self.clock.set(NOW + timedelta(seconds=seconds))
        self.answers.answers[JOB_QUERY] = answer
        await self.source.round(self.answers)
        self.pipeline.tick()
        out = []
        while not self.queue.empty():
            out.append(self.queue.get_nowait())
        return out


async def test_rounds_feed_the_hang_rule_and_a_gap_is_never_a_hang() -> None:
    h = Harness({PROGRESS_LABEL: "prometheus", HANG_TIMEOUT_LABEL: "60"})
    assert await h.round(0, vector("10")) == []
    assert await h.round(10, vector("11")) == []  # the first step seen: armed
    assert h.answers.asked[-1] == JOB_QUERY
    for s in range(20, 200, 10):  # Prometheus down for three minutes: reported once, no hang
        assert await h.round(s, Unanswered("prometheus-unreachable", "refused")) == []
    assert h.pipeline.rejected == 1
    for s in range(200, 250, 10):  # back, the same step: a whole timeout from the last gap (190) first
        assert await h.round(s, vector("11")) == []
    [hang] = await h.round(250, vector("11"))
    assert isinstance(hang, Fault)
    assert is_hang(hang)
    assert hang.source.kind == "PrometheusQuery"
    assert hang.pod is not None
    assert hang.pod.name == "job-0"
    [cleared] = await h.round(270, vector("12"))
    assert isinstance(cleared, FaultCleared)
    await h.round(280, Unanswered("prometheus-unreachable", "refused"))
    assert h.pipeline.rejected == 2  # a new outage after an answer: said again


async def test_a_job_no_longer_on_prometheus_is_forgotten_and_a_bad_answer_said_once() -> None:
    h = Harness({PROGRESS_LABEL: "prometheus", HANG_TIMEOUT_LABEL: "60"})
    await h.round(0, vector("10"))
    await h.round(10, vector("11"))
    assert reading_key("ns", "job") in h.pipeline.hang.tracks
    for s in (20, 30, 40):
        assert await h.round(s, vector("1.5")) == []  # not a step: reported once
    assert h.pipeline.rejected == 1
    h.label({PROGRESS_LABEL: "lease"})
    await h.round(50, vector("11"))
    assert reading_key("ns", "job") not in h.pipeline.hang.tracks
    assert h.answers.asked.count(JOB_QUERY) == 5  # rounds 0-40; not asked once the job left Prometheus


async def test_without_a_url_each_prometheus_job_is_reported_once() -> None:
    h = Harness({PROGRESS_LABEL: "prometheus"}, url="")
    for s in (0, 10, 20):
        assert await h.round(s, vector("1")) == []
    assert h.pipeline.rejected == 1
    assert h.answers.asked == []


async def test_a_job_without_a_running_pod_is_not_queried() -> None:
    h = Harness({PROGRESS_LABEL: "prometheus"})
    pending = factories.pod("job-0", node="n1", rank=0, phase="Pending", created_at=NOW)
    h.apply(change("pods", "ns/job-0", pending))
    for s in (0, 10):
        assert await h.round(s, vector("1")) == []
    assert h.answers.asked == []
    assert h.pipeline.rejected == 0
    h.apply(change("pods", "ns/job-0", factories.pod("job-0", node="n1", rank=0, created_at=NOW)))
    await h.round(20, vector("1"))
    assert h.answers.asked == [JOB_QUERY]


async def test_a_restart_with_no_pod_running_for_a_while_still_ends_in_a_first_step() -> None:
    """The job stays followed while none of its pods runs (not queried), so the restart counter's move is seen and
    the first step after it is found (HangDetector.resumed); forgetting it then lost that first step."""
    h = Harness({PROGRESS_LABEL: "prometheus", HANG_TIMEOUT_LABEL: "60"})
    await h.round(0, vector("10"))
    await h.round(10, vector("11"))
    h.apply(change("pods", "ns/job-0", factories.pod("job-0", node="n1", rank=0, phase="Pending", created_at=NOW)))
    await h.round(20, vector("11"))
    labels = {"fault-scheduling": "force", PROGRESS_LABEL: "prometheus", HANG_TIMEOUT_LABEL: "60"}
    restarted = factories.job(labels=labels, fault_retry_times=3, created_at=NOW, version="1")
    h.apply(change("vcjobs", "ns/job", restarted))
    await h.round(30, vector("11"))
    h.apply(change("pods", "ns/job-0", factories.pod("job-0", node="n1", rank=0, created_at=NOW)))
    await h.round(40, vector("11"))
    await h.round(50, vector("5"))  # the first step after the restart (resumed from a checkpoint)
    [resumed] = h.pipeline.take_resumed()
    assert (resumed.step, resumed.at) == (5, NOW + timedelta(seconds=50))
