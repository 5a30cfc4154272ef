"""HealthServer against a real local aiohttp server on 127.0.0.1, port 0."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping

import aiohttp
import pytest
from prometheus_client import CollectorRegistry
from support.polling import eventually

import agent.runtime.server as server_module
from agent.runtime.server import Check, HealthServer, Probe, tasks_alive
from agent.settings import ServerSettings
from agent.sinks.metrics import AgentMetrics


def _settings(lag_limit: float = 5.0) -> ServerSettings:
    return ServerSettings(bind_address="127.0.0.1", port=0, loop_lag_limit_s=lag_limit)


async def _get(server: HealthServer, path: str, accept: str = "") -> tuple[int, str, dict[str, object] | str]:
    headers = {"Accept": accept} if accept else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{server.port}{path}", headers=headers) as resp,
    ):
        ctype = resp.headers["Content-Type"]
        body: dict[str, object] | str = await resp.json() if "json" in ctype else await resp.text()
        return resp.status, ctype, body


@pytest.fixture
async def started() -> AsyncIterator[tuple[HealthServer, AgentMetrics]]:
    reg = CollectorRegistry()
    metrics = AgentMetrics(reg)
    server = HealthServer(_settings(), reg)
    await server.start()
    try:
        yield server, metrics
    finally:
        await server.stop()


async def test_metrics_serves_the_injected_registry(started: tuple[HealthServer, AgentMetrics]) -> None:
    server, metrics = started
    metrics.leader(True)
    metrics.input_rejected("ConfigMap", "json-truncated")
    status, ctype, body = await _get(server, "/metrics")
    assert status == 200
    assert ctype.startswith("text/plain")
    assert isinstance(body, str)
    assert "fault_agent_leader 1.0" in body
    assert 'fault_agent_input_rejected_total{reason="json-truncated",source="ConfigMap"} 1.0' in body


async def test_metrics_speaks_openmetrics_when_asked(started: tuple[HealthServer, AgentMetrics]) -> None:
    server, _ = started
    status, ctype, body = await _get(server, "/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert status == 200
    assert ctype.startswith("application/openmetrics-text")
    assert isinstance(body, str)
    assert body.rstrip().endswith("# EOF")


async def test_unknown_path_is_404(started: tuple[HealthServer, AgentMetrics]) -> None:
    server, _ = started
    status, _, _ = await _get(server, "/nope")
    assert status == 404


async def _async_true() -> bool:
    await asyncio.sleep(0)
    return True


def _raises() -> bool:
    raise RuntimeError("cache index broken")


@pytest.mark.parametrize(
    ("probes", "status", "failing", "detail_part"),
    [
        pytest.param({}, 200, set(), "", id="no-probes-ready"),
        pytest.param({"caches": lambda: True, "kafka": lambda: Check(True, "connected")}, 200, set(), "", id="all-ok"),
        pytest.param(
            {"caches": lambda: Check(False, "pods not synced"), "kafka": lambda: True},
            503,
            {"caches"},
            "pods not synced",
            id="cache-not-synced",
        ),
        pytest.param({"kafka": lambda: False}, 503, {"kafka"}, "", id="bool-false"),
        pytest.param({"async": _async_true}, 200, set(), "", id="async-probe-ok"),
        pytest.param({"boom": _raises}, 503, {"boom"}, "RuntimeError: cache index broken", id="probe-raises"),
    ],
)
async def test_readyz_reflects_probes(
    probes: Mapping[str, Probe], status: int, failing: set[str], detail_part: str
) -> None:
    server = HealthServer(_settings(), CollectorRegistry(), readiness=probes)
    await server.start()
    try:
        got_status, ctype, body = await _get(server, "/readyz")
    finally:
        await server.stop()
    assert ctype.startswith("application/json")
    assert isinstance(body, dict)
    checks = body["checks"]
    assert isinstance(checks, dict)
    assert got_status == status
    assert body["status"] == ("ok" if status == 200 else "fail")
    assert set(checks) == set(probes)
    assert {n for n, c in checks.items() if not c["ok"]} == failing
    if detail_part:
        assert any(detail_part in c["detail"] for c in checks.values())


async def test_healthz_ok_includes_event_loop(started: tuple[HealthServer, AgentMetrics]) -> None:
    server, _ = started
    status, _, body = await _get(server, "/healthz")
    assert status == 200
    assert isinstance(body, dict)
    assert body["checks"]["event-loop"]["ok"] is True  # type: ignore[index]


async def test_healthz_fails_when_a_task_has_died() -> None:
    async def crash() -> None:
        raise RuntimeError("bug")

    async def forever() -> None:
        await asyncio.Event().wait()

    tasks: list[asyncio.Task[object]] = [
        asyncio.create_task(forever(), name="watch-pods"),
        asyncio.create_task(crash(), name="watch-nodes"),
    ]
    server = HealthServer(_settings(), CollectorRegistry(), liveness={"tasks": tasks_alive(lambda: tasks)})
    await server.start()
    try:
        await asyncio.wait([tasks[1]])
        status, _, body = await _get(server, "/healthz")
        # replacing the dead task makes the probe pass again: the probe reads the list on every call
        tasks[1] = asyncio.create_task(forever(), name="watch-nodes")
        status_after, _, _ = await _get(server, "/healthz")
    finally:
        await server.stop()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert status == 503
    assert isinstance(body, dict)
    assert body["checks"]["tasks"] == {"ok": False, "detail": "finished: watch-nodes"}  # type: ignore[index]
    assert status_after == 200


async def test_healthz_fails_after_the_loop_was_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The heartbeat every 50 ms instead of every second (the rule is the same: a beat late by more than the
    limit fails the check until beats come on time again), so the test blocks the loop for 0.6 s, not seconds."""
    monkeypatch.setattr(server_module, "HEARTBEAT_INTERVAL_S", 0.05)
    server = HealthServer(_settings(lag_limit=0.2), CollectorRegistry())
    await server.start()

    async def healthz() -> int:
        return (await _get(server, "/healthz"))[0]

    try:
        await eventually(healthz, lambda status: status == 200, what="/healthz ok before the block", interval_s=0.05)
        time.sleep(0.6)  # noqa: ASYNC251 deliberately block the event loop, as a synchronous bug would
        status, _, body = await _get(server, "/healthz")
        # on-time heartbeats later it is healthy again
        await eventually(healthz, lambda status: status == 200, what="/healthz ok after the block", interval_s=0.05)
    finally:
        await server.stop()
    assert status == 503
    assert isinstance(body, dict)
    assert "event loop lag" in body["checks"]["event-loop"]["detail"]  # type: ignore[index]


async def test_serve_stops_on_event_and_releases_port() -> None:
    server = HealthServer(_settings(), CollectorRegistry())
    stop = asyncio.Event()
    task = asyncio.create_task(server.serve(stop))
    for _ in range(100):
        try:
            port = server.port
            break
        except RuntimeError:
            await asyncio.sleep(0.01)
    else:
        pytest.fail("server did not start")
    stop.set()
    await asyncio.wait_for(task, 5)
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/healthz"):
            pass
    await server.stop()  # second stop is harmless


async def test_port_before_start_raises() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = HealthServer(_settings(), CollectorRegistry()).port


async def test_bind_failure_raises_oserror(started: tuple[HealthServer, AgentMetrics]) -> None:
    server, _ = started
    clash = HealthServer(_settings().model_copy(update={"port": server.port}), CollectorRegistry())
    with pytest.raises(OSError, match="in use"):
        await clash.start()


async def test_a_port_clash_names_the_setting_that_chooses_the_port(started: tuple[HealthServer, AgentMetrics]) -> None:
    """Issue 41, 8: a port clash said only 'address already in use'; it names FAULT_AGENT_SERVER__PORT now."""
    server, _ = started
    clash = HealthServer(_settings().model_copy(update={"port": server.port}), CollectorRegistry())
    with pytest.raises(OSError, match=r"in use.*server\.port \(FAULT_AGENT_SERVER__PORT; 0 takes any free port\)"):
        await clash.start()
