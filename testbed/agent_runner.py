"""Run the agent (`fault-agent run`) as a subprocess against a testbed, and read what it publishes.

Used by the end-to-end tests, `make demo` and the end-to-end benchmarks: the agent is started exactly as an
operator would start it (its own process, settings from FAULT_AGENT_* environment variables), and observed from
outside (Kafka topics, /metrics, cluster objects).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from testbed.cluster import Testbed, free_port

FAULTS_TOPIC = "training.faults"
RECOVERIES_TOPIC = "training.recoveries"

_LOUD = re.compile(r'"level": ?"(warning|error|critical)"')
STARTED: list[AgentProcess] = []
"""Every AgentProcess started in this Python process, in start order (the test suite names their logs when a
test fails: tests/conftest.py)."""


def before_exec(cpus: frozenset[int] | None, *, own_session: bool) -> None:
    """In a child process between fork and exec (``subprocess.Popen(preexec_fn=...)``): a session of its own when
    `own_session` (``setsid``: a scheduling group of its own under the kernel's autogroup), and the CPUs `cpus` only
    when given (``sched_setaffinity``); every thread it starts inherits both. Used for the agent
    (:class:`AgentProcess`) and for bench_e2e's reflex watchers."""
    if own_session:
        os.setsid()
    if cpus:
        os.sched_setaffinity(0, cpus)


class AgentProcess:
    """One `fault-agent run` process.

    Args:
        testbed: the running testbed (kubeconfig and Kafka bootstrap come from it).
        workdir: folder for the agent's log and outbox.
        settings: extra FAULT_AGENT_* variables (without the prefix, e.g. {"POLICY__DRY_RUN": "true"}).
        name: leader-election identity and log file name.
        args: extra arguments after ``fault-agent run`` (e.g. ``["--record", DIR]``).
        cpus: CPU numbers the process (every thread of it) may run on, set before exec (Linux); None: this
            process's own.
        own_session: start it in a session of its own (``setsid`` before exec). With the kernel's autogroup
            scheduling (``/proc/sys/kernel/sched_autogroup_enabled``, on in most distributions) a session is a
            scheduling group that shares the CPUs fairly with the others, as a container's cgroup does in a
            cluster and as each testbed component's session does: the agent then does not share one group's
            CPU with the process that started it (a benchmark's own watchers). False: this process's session.
    """

    def __init__(
        self,
        testbed: Testbed,
        workdir: Path,
        *,
        settings: Mapping[str, str] | None = None,
        name: str = "agent",
        args: Sequence[str] = (),
        cpus: frozenset[int] | None = None,
        own_session: bool = False,
    ) -> None:
        self.testbed = testbed
        self.own_session = own_session
        self.cpus = cpus  # the CPUs the process may run on (sched_setaffinity before exec); None: inherited
        self.workdir = workdir
        self.name = name
        self.port = free_port()
        self.log = workdir / f"{name}.log"
        self.env = {
            "FAULT_AGENT_KUBE__KUBECONFIG": str(testbed.kubeconfig),
            "FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS": testbed.kafka_bootstrap,
            "FAULT_AGENT_KAFKA__CREATE_TOPICS": "true",
            "FAULT_AGENT_KAFKA__TOPIC_REPLICATION_FACTOR": "1",
            "FAULT_AGENT_KAFKA__OUTBOX_DIR": str(workdir / f"{name}-outbox"),
            "FAULT_AGENT_SERVER__BIND_ADDRESS": "127.0.0.1",
            "FAULT_AGENT_SERVER__PORT": str(self.port),
            "FAULT_AGENT_LOG__FORMAT": "json",
            "FAULT_AGENT_LEADER__NAMESPACE": "default",
            # The testbed runs the agent as its cluster admin, whom no admission policy confines: fail closed
            # (policy.admission_check=refuse, the default) would refuse every restart, and warn would raise
            # FaultAgentAdmissionPolicyNotInForce on the alert tests' Prometheus. A test of the check passes its own
            # value (tests/integration/test_fail_closed.py runs it in-process as the ServiceAccount).
            "FAULT_AGENT_POLICY__ADMISSION_CHECK": "off",
        }
        for key, value in (settings or {}).items():
            self.env[f"FAULT_AGENT_{key}"] = value
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None

    def _before_exec(self) -> None:
        """In the child before exec: :func:`before_exec` with :attr:`cpus` and :attr:`own_session`."""
        before_exec(self.cpus, own_session=self.own_session)

    @property
    def running(self) -> bool:
        """True while the process has been started and has not exited."""
        return self.proc is not None and self.proc.poll() is None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, ready_timeout_s: float = 60.0) -> None:
        """Start the process and wait for /readyz. Raises RuntimeError (with the log's tail) if it fails."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        STARTED.append(self)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAULT_AGENT_")}
        env.update(self.env)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agent", "run", "--identity", self.name, *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=self._before_exec if self.cpus or self.own_session else None,
            )
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}; log {self.log}:\n{self.tail()}")
            if self.http_status("/readyz") == 200:
                return
            time.sleep(0.2)
        raise RuntimeError(f"agent not ready within {ready_timeout_s} s; log {self.log}:\n{self.tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int | None:
        """Send `sig` (SIGTERM: graceful; SIGKILL: crash) and wait; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)

    def http_status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.url + path, timeout=2) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except OSError:
            return 0

    def metrics(self) -> str:
        """The /metrics text."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels` (0.0 when absent)."""
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            metric_name = head.split("{", 1)[0]
            if metric_name != name:
                continue
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
        return total

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def report(self, *, notable: int = 40, last: int = 15, width: int = 400) -> list[str]:
        """What a failed test shows of this agent: its log's path, then its last `notable` warning/error lines
        (JSON ``"level"`` warning, error or critical) and its last `last` lines, each cut at `width` characters."""
        try:
            lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return [f"--- agent {self.name}: {self.log} (no log)"]
        loud = [line for line in lines if _LOUD.search(line)][-notable:]
        out = [f"--- agent {self.name}: {self.log} ({len(lines)} lines, {len(loud)} warnings/errors shown)"]
        out += ["    " + line[:width] for line in loud]
        out.append(f"    ... its last {min(last, len(lines))} lines:")
        out += ["    " + line[:width] for line in lines[-last:]]
        return out


@dataclass
class Received:
    """One event read from Kafka: topic, key, headers, CloudEvent payload and the broker timestamp (ms)."""

    topic: str
    key: str
    headers: dict[str, str]
    event: dict[str, Any]
    timestamp_ms: int

    @property
    def type(self) -> str:
        return str(self.event.get("type", ""))


@dataclass
class EventReader:
    """Collects every event on the agent's topics from the moment it starts (consumer in the background)."""

    bootstrap: str
    topics: tuple[str, ...] = (FAULTS_TOPIC, RECOVERIES_TOPIC)
    events: list[Received] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _consumer: Any = None

    async def start(self, *, from_beginning: bool = False) -> None:
        from aiokafka import AIOKafkaConsumer

        self._consumer = AIOKafkaConsumer(
            *self.topics,
            bootstrap_servers=self.bootstrap,
            auto_offset_reset="earliest" if from_beginning else "latest",
            enable_auto_commit=False,
            metadata_max_age_ms=1000,
        )
        await self._consumer.start()
        self._task = asyncio.create_task(self._run(), name="event-reader")

    async def _run(self) -> None:
        assert self._consumer is not None
        async for msg in self._consumer:
            try:
                payload = orjson.loads(msg.value)
            except orjson.JSONDecodeError:
                payload = {"unparsable": msg.value.decode(errors="replace")}
            self.events.append(
                Received(
                    topic=msg.topic,
                    key=(msg.key or b"").decode(),
                    headers={k: v.decode(errors="replace") for k, v in (msg.headers or [])},
                    event=payload,
                    timestamp_ms=msg.timestamp,
                )
            )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def wait_for(
        self, predicate: Callable[[Received], bool], *, count: int = 1, timeout_s: float = 60.0, what: str = ""
    ) -> list[Received]:
        """Wait until `count` events match `predicate`; returns them. Raises TimeoutError naming `what`."""
        deadline = time.monotonic() + timeout_s
        while True:
            hits = [e for e in self.events if predicate(e)]
            if len(hits) >= count:
                return hits
            if time.monotonic() > deadline:
                seen = ", ".join(f"{e.type}({e.event.get('subject')})" for e in self.events[-20:])
                raise TimeoutError(f"timed out after {timeout_s} s waiting for {what or 'events'}; last seen: {seen}")
            await asyncio.sleep(0.1)

    def of_type(self, fragment: str) -> list[Received]:
        """Events whose CloudEvents type contains `fragment` (e.g. "recovery.succeeded")."""
        return [e for e in self.events if fragment in e.type]
