"""Prometheus' HTTP API, as the progress source reads it: one instant query (``GET <url>/api/v1/query``).

The answer is returned as Prometheus sends it (its JSON envelope, success or ``status: error``; the pure reader is
agent.core.progress_prom.read_value); an evaluation that gets no such envelope is an
:class:`~agent.core.progress_prom.Unanswered`. Never raises on a network or HTTP problem.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from agent.core.progress_prom import Unanswered
from agent.settings import PrometheusSettings

_MAX_BODY = 1 << 20
"""Bytes of an answer read at most: a step query's answer is a few hundred; a bigger one is a query gone wrong."""


class PrometheusClient:
    """A session to one Prometheus (``prometheus.url``), with its bearer token and CA when set. Use as an async
    context manager (the session is closed at the end)."""

    def __init__(self, settings: PrometheusSettings) -> None:
        self.settings = settings
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> PrometheusClient:
        ssl_context: ssl.SSLContext | bool = True
        if self.settings.ca_file:
            ssl_context = ssl.create_default_context(cafile=self.settings.ca_file)
        connector = aiohttp.TCPConnector(ssl=ssl_context, limit=self.settings.concurrency)
        self._session = aiohttp.ClientSession(connector=connector)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def query(self, expr: str) -> Any | Unanswered:
        """Evaluate `expr` now. Returns the decoded answer (the API's envelope, ``status`` success or error), or
        why there is none: ``prometheus-unreachable`` (no connection, a timeout, a TLS failure, an unreadable
        token file), ``prometheus-http-error`` (an HTTP status whose body is not the API's JSON envelope)."""
        assert self._session is not None, "use PrometheusClient as an async context manager"
        s = self.settings
        headers = {"Accept": "application/json"}
        if s.bearer_token_file:
            try:
                token = (await asyncio.to_thread(Path(s.bearer_token_file).read_text)).strip()
            except OSError as e:
                return Unanswered("prometheus-unreachable", f"bearer token file {s.bearer_token_file}: {e}")
            headers["Authorization"] = f"Bearer {token}"
        params = {"query": expr, "timeout": f"{s.timeout_s:g}"}  # seconds: the API takes a float or a duration
        try:
            async with self._session.get(
                f"{s.url}/api/v1/query", params=params, headers=headers,
                timeout=aiohttp.ClientTimeout(total=s.timeout_s),
            ) as resp:  # fmt: skip
                body = await resp.content.read(_MAX_BODY + 1)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            return Unanswered("prometheus-unreachable", f"{s.url}: {type(e).__name__}: {str(e)[:200]}")
        if len(body) > _MAX_BODY:
            return Unanswered("prometheus-http-error", f"{s.url}: an answer over {_MAX_BODY} bytes (HTTP {status})")
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            decoded = None
        # Prometheus answers its own errors (400 bad_data, 422 execution, 503 timeout) with the JSON envelope
        if not isinstance(decoded, dict) or decoded.get("status") not in ("success", "error"):
            return Unanswered("prometheus-http-error", f"{s.url}: HTTP {status} without Prometheus' JSON answer: "
                              f"{body[:120]!r}")  # fmt: skip
        if status >= 500 and decoded.get("status") == "error" and decoded.get("errorType") == "unavailable":
            return Unanswered("prometheus-unreachable", f"{s.url}: {str(decoded.get('error'))[:200]}")
        return decoded
