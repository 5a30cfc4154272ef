"""A training loop that exports its step counter for Prometheus, as a job that already has metrics does: it takes a
step every `step_s` seconds and serves ``GET /metrics`` (Prometheus' text exposition format 0.0.4) on 127.0.0.1 at
a free port, for the testbed's real Prometheus to scrape (testbed.prometheus.PrometheusServer's `scrape_jobs`). It
can hang (steps stop; the endpoint keeps answering with the last step, as a process stuck in a collective whose
metrics thread still runs) and carry on again. Test helper code only; nothing in the agent imports it.

Exported (gauges; one series each, labelled with the job's namespace and name):

- ``training_step{namespace, job_name}``: the last completed step;
- ``training_step_seconds{namespace, job_name}``: the seconds per step.

kwok runs no containers, so this runs in the test's process instead of the job's rank-0 pod.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STEP_METRIC = "training_step"
STEP_TIME_METRIC = "training_step_seconds"


@dataclass
class ExportingLoop:
    """The loop and its endpoint (see the module docstring); :attr:`target` is the ``host:port`` to scrape."""

    namespace: str
    job: str
    step_s: float = 0.25
    step: int = 0
    scrapes: int = 0
    hung: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def target(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def exposition(self) -> str:
        """The /metrics body now."""
        labels = f'namespace="{self.namespace}",job_name="{self.job}"'
        return (
            f"# TYPE {STEP_METRIC} gauge\n{STEP_METRIC}{{{labels}}} {self.step}\n"
            f"# TYPE {STEP_TIME_METRIC} gauge\n{STEP_TIME_METRIC}{{{labels}}} {self.step_s}\n"
        )

    def start(self) -> ExportingLoop:
        """Serve /metrics and start stepping."""
        loop = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                body = loop.exposition().encode()
                loop.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        for target, name in ((self._server.serve_forever, "metrics"), (self._run, "steps")):
            thread = threading.Thread(target=target, name=f"exporting-loop-{name}:{self.job}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def hang(self) -> None:
        """Steps stop; /metrics keeps answering the last step."""
        self.hung.set()

    def resume(self) -> None:
        """Steps go on."""
        self.hung.clear()

    def stop(self) -> None:
        """Stop stepping and serving."""
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.step_s):
            if not self.hung.is_set():
                self.step += 1
