"""Rank 0's training loop on the testbed, as far as its progress heartbeat goes: it takes a step every `step_s`
seconds and reports it with the real client (agent.training.progress_client.ProgressReporter) against the testbed's
apiserver, as a training job's rank 0 does in a pod; it can hang (steps stop, the client's thread keeps renewing
the Lease with the last step, as a process stuck in a collective would), carry on again (the first step after
a restart, resumed from its last checkpoint), save a checkpoint on demand, and answer a graceful exit
(:class:`GracefulExitAnswer`: on SIGTERM or ``GracefulExit`` 1, stop stepping and save after a while). With
`ranks` it also reports each pod rank's compute time per step (the straggler signal, agent.core.straggler),
all `step_s` except a rank made slow with :meth:`slow`. Test helper
code only; nothing in the agent imports it.

kwok runs no containers, so nothing runs inside the job's pods: this loop runs in the test's process instead and
names the job's rank-0 pod as the Lease's holder. The signals a graceful exit sends to the processes are read from
the cluster instead: a pod of the job being deleted (its ``deletionTimestamp``: the kubelet sends SIGTERM and waits
its grace period), or ``GracefulExit`` 1 in the job's ``reset-config-<job>`` (TaskD's manager SIGTERMs the workers:
testbed.training_stand_in).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from agent.training.progress_client import ProgressReporter
from testbed.cluster import Testbed

VOLCANO_JOB_LABEL = "volcano.sh/job-name"


@dataclass
class TrainingLoop:
    """The loop (see the module docstring). `checkpoint_every`: steps between checkpoints (its step is reported
    as the last checkpoint). `interval_s`: the client's write interval."""

    testbed: Testbed
    namespace: str
    job: str
    pod: str
    step_s: float = 0.5
    interval_s: float = 1.0
    checkpoint_every: int = 10
    ranks: int = 0  # pod ranks whose step times are reported (0: none, rank 0's heartbeat only)
    slow_ranks: dict[int, float] = field(default_factory=dict)  # pod rank -> how many times slower it computes
    step: int = 0
    checkpoint: int = 0
    stepped_at: float = 0.0  # time.time() of the last step (0: none yet), for benchmarks timing a hang from it
    history: list[tuple[float, int]] | None = None  # when given: (time.time(), step) of every step, appended
    hung: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _stepping: threading.Lock = field(default_factory=threading.Lock)  # held while a step is taken
    _thread: threading.Thread | None = None
    reporter: ProgressReporter | None = None

    def start(self) -> TrainingLoop:
        """Start stepping (and the client's writer thread)."""
        self.reporter = ProgressReporter(
            self.job, self.namespace, self.pod, server=self.testbed.apiserver_url, token=self.testbed.token,
            ca_file=str(self.testbed.ca_file), interval_s=self.interval_s,
        ).start()  # fmt: skip
        self._thread = threading.Thread(target=self._run, name=f"training-loop:{self.job}", daemon=True)
        self._thread.start()
        return self

    def hang(self) -> None:
        """Steps stop; the Lease keeps being renewed with the last step. When it returns no step is under way."""
        self.hung.set()
        with self._stepping:
            pass

    def stop_training(self) -> int:
        """As a fault stops training: steps stop (:meth:`hang`) and the last step taken is written to the Lease now,
        so no step taken before this call reaches the Lease later (the client writes every `interval_s`; a step
        written after a restart began would read as the training resumed). Returns that step."""
        assert self.reporter is not None
        self.hang()
        self.reporter.flush()
        return self.step

    def resume(self, *, from_checkpoint: bool = True) -> None:
        """Steps go on (after a restart: from the last checkpoint's step, as a restarted job does)."""
        if from_checkpoint:
            self.step = self.checkpoint
        self.hung.clear()

    def resume_now(self) -> tuple[int, float, float]:
        """After a restart: the first step from the last checkpoint (checkpoint + 1) taken and its Lease written at
        once, not at the loop's next tick nor the client's next interval; then steps go on every `step_s`. For a
        benchmark timing the first step: the write's moment is known. Returns (that step, ``time.time()`` when its
        write was sent, when it was answered). A failed write is the client's (printed once, retried at its next
        interval); the times are then of the failed attempt."""
        assert self.reporter is not None
        self.step = self.checkpoint + 1  # still hung: the loop's thread takes no step meanwhile
        self.reporter.step(self.step, checkpoint_step=self.checkpoint)
        sent = time.time()
        self.reporter.flush()
        self.stepped_at = time.time()
        if self.history is not None:
            self.history.append((self.stepped_at, self.step))
        self.hung.clear()
        return self.step, sent, self.stepped_at

    def slow(self, rank: int, factor: float) -> None:
        """Pod rank `rank` computes `factor` times slower from now on (a straggler; 1: healthy again)."""
        self.slow_ranks[rank] = factor

    def save_checkpoint(self) -> int:
        """Write a checkpoint of the current step now, as a training loop does around its save: the Lease says
        ``checkpointing: true``, then the new ``checkpoint-step`` (each written at once). Returns the step saved."""
        assert self.reporter is not None
        step = self.step
        self.reporter.checkpoint_started()
        self.checkpoint = step
        self.reporter.checkpoint_done(step)
        return step

    def stop(self) -> None:
        """Stop the loop and the client (no final write)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.reporter is not None:
            self.reporter.close(final_write=False)

    def _run(self) -> None:
        assert self.reporter is not None
        while not self._stop.wait(self.step_s):
            with self._stepping:
                if self.hung.is_set():
                    continue
                self.step += 1
                if self.step % self.checkpoint_every == 0:
                    self.checkpoint = self.step
                self.reporter.step(self.step, checkpoint_step=self.checkpoint)
                if self.ranks:
                    times = [self.step_s * self.slow_ranks.get(r, 1.0) for r in range(self.ranks)]
                    self.reporter.rank_step_times(times)
                self.stepped_at = time.time()
                if self.history is not None:
                    self.history.append((self.stepped_at, self.step))


@dataclass
class ExitSeen:
    """What :class:`GracefulExitAnswer` saw and did.

    Attributes:
        signal: ``SIGTERM`` (a pod of the job was being deleted) or ``GracefulExit`` (its reset-config said 1);
            "" before either.
        deletion_requested_at: for ``SIGTERM``, the apiserver's time of the pod's graceful deletion (its
            ``deletionTimestamp`` less its ``deletionGracePeriodSeconds``; whole seconds), else None.
        signalled_at: ``time.monotonic()`` when the answer saw the signal.
        saved_step: the checkpoint written (None: none yet, or the loop never saves).
        saved_at: ``time.monotonic()`` when it was written.
    """

    signal: str = ""
    deletion_requested_at: datetime | None = None
    signalled_at: float | None = None
    saved_step: int | None = None
    saved_at: float | None = None


class GracefulExitAnswer:
    """Answers a graceful exit as the rank 0 of a training job that saves on SIGTERM does: once a pod of the
    Volcano Job `job` is being deleted or its reset-config says ``GracefulExit`` 1, the `loop` stops stepping and,
    `after_s` seconds later, writes a checkpoint of its last step (:meth:`TrainingLoop.save_checkpoint`); with
    `saves` False it stops stepping and never saves (a process that cannot). Polls every `poll_s` seconds; answers
    once. Use as an async context manager around the fault.
    """

    def __init__(
        self, api: k8s.ApiClient, loop: TrainingLoop, *, after_s: float, saves: bool = True, poll_s: float = 0.1
    ) -> None:
        self.core = k8s.CoreV1Api(api)
        self.loop = loop
        self.after_s = after_s
        self.saves = saves
        self.poll_s = poll_s
        self.seen = ExitSeen()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> GracefulExitAnswer:
        self._task = asyncio.create_task(self._run(), name=f"graceful-exit:{self.loop.job}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            if await self._signalled():
                break
            await asyncio.sleep(self.poll_s)
        self.seen.signalled_at = time.monotonic()
        self.loop.hang()  # the workers stop training at the signal
        if not self.saves:
            return
        await asyncio.sleep(self.after_s)
        step = await asyncio.to_thread(self.loop.save_checkpoint)
        self.seen.saved_step, self.seen.saved_at = step, time.monotonic()

    async def _signalled(self) -> bool:
        ns, job = self.loop.namespace, self.loop.job
        pods = await self.core.list_namespaced_pod(ns, label_selector=f"{VOLCANO_JOB_LABEL}={job}")
        for pod in pods.items:
            meta = pod.metadata
            if meta.deletion_timestamp is not None:
                grace = meta.deletion_grace_period_seconds or 0
                self.seen.signal = "SIGTERM"
                self.seen.deletion_requested_at = meta.deletion_timestamp - timedelta(seconds=grace)
                return True
        try:
            cm = await self.core.read_namespaced_config_map(f"reset-config-{job}", ns)
        except ApiException as e:
            if e.status != 404:
                raise
            return False
        text = (cm.data or {}).get("reset.json")
        if text is not None and json.loads(text).get("GracefulExit", 0) == 1:
            self.seen.signal = "GracefulExit"
            return True
        return False
