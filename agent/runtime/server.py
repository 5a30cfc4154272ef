"""HTTP server on the agent's event loop: ``/metrics``, ``/healthz`` (liveness) and ``/readyz`` (readiness).

The server knows nothing about sources, Kafka or the leader: the app injects named probes, small callables
that read in-memory state and answer with :class:`Check` (or a bool). Probes must be cheap and must not do I/O;
a probe that raises counts as failing, with the exception as its detail.

- ``/healthz`` = the built-in ``event-loop`` check (a 1 s heartbeat task runs on time, within
  ``ServerSettings.loop_lag_limit_s``) plus the liveness probes (e.g. "every agent task alive", see
  :func:`tasks_alive`). Failing means "restart this container".
- ``/readyz`` = the readiness probes (e.g. "every cache synced", "Kafka or the outbox healthy"). Failing means
  "do not count this replica as serving"; it does not restart it.

Both answer JSON ``{"status": "ok"|"fail", "checks": {name: {"ok": bool, "detail": str}}}`` with HTTP 200 or 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from agent.settings import ServerSettings

log = structlog.get_logger("agent.runtime.server")

HEARTBEAT_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Check:
    """One probe's answer: `ok`, and a short `detail` a person can read (why it fails, or a summary)."""

    ok: bool
    detail: str = ""


#: A probe: no arguments; returns a Check or a bool, directly or as an awaitable.
Probe = Callable[[], "Check | bool | Awaitable[Check | bool]"]


def tasks_alive(tasks: Callable[[], Iterable[asyncio.Task[object]]]) -> Probe:
    """A liveness probe that fails when any task returned by `tasks()` has finished (crashed or returned).

    `tasks` is called on every probe so the app can replace tasks (e.g. a restarted watch). Detail names the
    finished tasks by their ``get_name()``.
    """

    def probe() -> Check:
        done = sorted(t.get_name() for t in tasks() if t.done())
        return Check(False, "finished: " + ", ".join(done)) if done else Check(True)

    return probe


class HealthServer:
    """The agent's HTTP server. Start with :meth:`start` (or run :meth:`serve` as a task), stop with :meth:`stop`.

    Args:
        settings: bind address, port (0 = any free port, see :attr:`port`) and loop-lag limit.
        registry: served as ``/metrics`` in the Prometheus text format (OpenMetrics if the scraper asks).
        liveness: extra named probes for ``/healthz``.
        readiness: named probes for ``/readyz``; with none, ``/readyz`` answers ok.
        metrics_auth: who may read ``/metrics``: called with the request's bearer token (None without one),
            answers ``(HTTP status, detail)``; anything but 200 is that status with the detail as text
            (agent.kube.metrics_auth). None: ``/metrics`` is open. ``/healthz`` and ``/readyz`` are always open.
    """

    def __init__(
        self,
        settings: ServerSettings,
        registry: CollectorRegistry,
        *,
        liveness: Mapping[str, Probe] | None = None,
        readiness: Mapping[str, Probe] | None = None,
        metrics_auth: Callable[[str | None], Awaitable[tuple[int, str]]] | None = None,
    ) -> None:
        self._settings = settings
        self._metrics_auth = metrics_auth
        self._registry = registry
        self._liveness = dict(liveness or {})
        self._readiness = dict(readiness or {})
        self._runner: web.AppRunner | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._last_beat = 0.0
        self._last_lag = 0.0
        self._port = 0

    @property
    def port(self) -> int:
        """The bound TCP port (useful when the settings asked for port 0).

        Raises:
            RuntimeError: the server is not started.
        """
        if self._runner is None:
            raise RuntimeError("server not started")
        return self._port

    async def start(self) -> None:
        """Bind and serve in the background on the running loop.

        Raises:
            OSError: the address or port cannot be bound; the message names the settings that choose them.
        """
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self._settings.bind_address, self._settings.port)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            where = f"{self._settings.bind_address}:{self._settings.port}"
            raise OSError(
                e.errno,
                f"metrics and health server cannot listen on {where}: {e.strerror or e}; choose another port with "
                "server.port (FAULT_AGENT_SERVER__PORT; 0 takes any free port) or another address with "
                "server.bind_address (FAULT_AGENT_SERVER__BIND_ADDRESS)",
            ) from e
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        loop = asyncio.get_running_loop()
        self._last_beat = loop.time()
        self._heartbeat = asyncio.create_task(self._beat(), name="server-heartbeat")
        log.info("http server listening", address=self._settings.bind_address, port=self._port)

    async def stop(self) -> None:
        """Stop serving and the heartbeat; safe to call twice."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def serve(self, stop: asyncio.Event) -> None:
        """Start, wait until `stop` is set (or this task is cancelled), then stop. For the app's TaskGroup.

        Raises:
            OSError: the address or port cannot be bound.
        """
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            now = loop.time()
            self._last_lag = max(0.0, now - before - HEARTBEAT_INTERVAL_S)
            self._last_beat = now

    def _loop_check(self) -> Check:
        limit = self._settings.loop_lag_limit_s
        if self._heartbeat is None or self._heartbeat.done():
            return Check(False, "heartbeat task not running")
        since = asyncio.get_running_loop().time() - self._last_beat
        lag = max(self._last_lag, since - HEARTBEAT_INTERVAL_S)
        if lag > limit:
            return Check(False, f"event loop lag {lag:.2f}s > {limit:g}s")
        return Check(True, f"lag {lag:.3f}s")

    async def _metrics(self, request: web.Request) -> web.Response:
        if self._metrics_auth is not None:
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            status, detail = await self._metrics_auth(token.strip() if scheme.lower() == "bearer" else None)
            if status != 200:
                headers = {"WWW-Authenticate": 'Bearer realm="fault-agent"'} if status == 401 else None
                return web.Response(status=status, text=detail + "\n", headers=headers)
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(self._registry), headers={"Content-Type": content_type})

    async def _healthz(self, request: web.Request) -> web.Response:
        return await self._answer({"event-loop": self._loop_check, **self._liveness})

    async def _readyz(self, request: web.Request) -> web.Response:
        return await self._answer(self._readiness)

    async def _answer(self, probes: Mapping[str, Probe]) -> web.Response:
        checks: dict[str, dict[str, object]] = {}
        for name, probe in probes.items():
            check = await _run(probe)
            checks[name] = {"ok": check.ok, "detail": check.detail}
        ok = all(c["ok"] for c in checks.values())
        if not ok:
            failing = sorted(n for n, c in checks.items() if not c["ok"])
            log.debug("probe failing", failing=failing)
        return web.json_response({"status": "ok" if ok else "fail", "checks": checks}, status=200 if ok else 503)


async def _run(probe: Probe) -> Check:
    try:
        result = probe()
        if inspect.isawaitable(result):
            result = await result
    except asyncio.CancelledError:
        raise
    except Exception as e:  # last resort of a health probe: one that raises is a failed check, not a failed server
        return Check(False, f"probe raised {type(e).__name__}: {e}")
    if isinstance(result, Check):
        return result
    return Check(bool(result))
