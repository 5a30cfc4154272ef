"""Rank 0's training loop on the testbed, as far as its progress heartbeat goes: it takes a step every `step_s`
seconds and reports it with the real client (agent.progress_client.ProgressReporter) against the testbed's
apiserver, as a training job's rank 0 does in a pod; it can hang (steps stop, the client's thread keeps renewing
the Lease with the last step, as a process stuck in a collective would) and carry on again (the first step after
a restart, resumed from its last checkpoint). Test helper code only; nothing in the agent imports it.

kwok runs no containers, so nothing runs inside the job's pods: this loop runs in the test's process instead and
names the job's rank-0 pod as the Lease's holder.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from agent.progress_client import ProgressReporter
from testbed.cluster import Testbed


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
    step: int = 0
    checkpoint: int = 0
    stepped_at: float = 0.0  # time.time() of the last step (0: none yet), for benchmarks timing a hang from it
    history: list[tuple[float, int]] | None = None  # when given: (time.time(), step) of every step, appended
    hung: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
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
        """Steps stop; the Lease keeps being renewed with the last step."""
        self.hung.set()

    def resume(self, *, from_checkpoint: bool = True) -> None:
        """Steps go on (after a restart: from the last checkpoint's step, as a restarted job does)."""
        if from_checkpoint:
            self.step = self.checkpoint
        self.hung.clear()

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
            if self.hung.is_set():
                continue
            self.step += 1
            if self.step % self.checkpoint_every == 0:
                self.checkpoint = self.step
            self.reporter.step(self.step, checkpoint_step=self.checkpoint)
            self.stepped_at = time.time()
            if self.history is not None:
                self.history.append((self.stepped_at, self.step))
