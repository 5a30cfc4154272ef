"""A training loop's progress heartbeat: one ``coordination.k8s.io/v1`` Lease per job, written by rank 0.

Standard library only (no Kubernetes client, no torch, no MindSpore, nothing of the agent's): copy this one file
into a training image, or ``from agent.training.progress_client import ProgressReporter`` where the package is
installed.
The Lease's name, labels and annotations are described in docs/progress.md and read by the agent
(agent.core.progress). Usage, in rank 0 only::

    reporter = ProgressReporter.in_cluster(job="my-job")  # or job from $FAULT_AGENT_JOB
    reporter.start()
    for step, batch in enumerate(loader, start=1):
        train_step(batch)
        reporter.step(step)
        if step % 1000 == 0:
            reporter.checkpoint_started()
            save_checkpoint(step)
            reporter.checkpoint_done(step)
    reporter.close()

:meth:`ProgressReporter.step` only records the values under a lock (no I/O, microseconds); a daemon thread
writes the Lease every ``interval_s`` seconds (30 by default: one write per job every 30 s, about 33 writes per
second for 1,000 jobs) with the latest values, so a slow apiserver never slows the training loop and a training
loop stuck in a collective keeps its Lease renewed with an unchanged step, which is what the agent calls a hang.
Writes that fail are retried at the next interval; the first failure of each kind is printed once to stderr and
all are counted in :attr:`ProgressReporter.failures`; nothing is ever raised into the training loop.

The pod needs a ServiceAccount allowed to ``get``, ``create`` and ``patch`` ``leases`` in its namespace
(docs/progress-writer-rbac.yaml is an example Role).
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PROGRESS_LABEL = "fault-agent.io/progress"
PROGRESS_LEASE = "lease"
LEASE_JOB_LABEL = "fault-agent.io/job"
LEASE_PREFIX = "fault-agent-progress-"
STEP_ANNOTATION = "fault-agent.io/step"
STEP_TIME_ANNOTATION = "fault-agent.io/step-time-s"
CHECKPOINT_STEP_ANNOTATION = "fault-agent.io/checkpoint-step"
CHECKPOINTING_ANNOTATION = "fault-agent.io/checkpointing"
RANK_STEP_TIMES_ANNOTATION = "fault-agent.io/rank-step-times-s"
# (the same names as agent.core.progress, repeated so this file stands alone; a unit test keeps them equal)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_STEP_TIME_WEIGHT = 0.2  # weight of the newest step in the step time's moving average


class ProgressError(Exception):
    """A Lease write the apiserver refused or that could not reach it. `status`: the HTTP status (0: no answer)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}" if status else detail)
        self.status = status


class ProgressReporter:
    """Writes the job's heartbeat Lease (module docstring).

    Args:
        job: the job's ``metadata.name`` (the Volcano Job or AscendJob).
        namespace: the job's namespace.
        pod: the writing pod's name (``spec.holderIdentity``).
        server: the apiserver's base URL, e.g. ``https://10.0.0.1:443``.
        token: a bearer token (a callable is re-read at every write: projected tokens rotate).
        ca_file: the CA bundle that signed the apiserver's certificate (None: the system's).
        interval_s: seconds between writes (≥ 1); the Lease's ``leaseDurationSeconds`` is 3 × this, the longest
            gap the agent should expect between writes.
        monotonic: the clock step times are measured with (``time.monotonic`` by default).

    Raises:
        ValueError: an empty job, namespace or pod, or `interval_s` < 1.
    """

    def __init__(
        self,
        job: str,
        namespace: str,
        pod: str,
        *,
        server: str,
        token: str | Callable[[], str],
        ca_file: str | None = None,
        interval_s: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not job or not namespace or not pod:
            raise ValueError("job, namespace and pod must not be empty")
        if interval_s < 1:
            raise ValueError("interval_s must be at least 1 second")
        self.job, self.namespace, self.pod = job, namespace, pod
        self.name = f"{LEASE_PREFIX}{job}"
        self.interval_s = interval_s
        self._server = server.rstrip("/")
        self._token = token
        self._ssl = ssl.create_default_context(cafile=ca_file)
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._step: int | None = None
        self._step_at: float | None = None
        self._step_time_s: float | None = None
        self._checkpoint_step: int | None = None
        self._checkpointing = False
        self._rank_step_times: tuple[float, ...] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported: set[int] = set()
        self.failures = 0
        self.writes = 0

    @classmethod
    def in_cluster(cls, job: str | None = None, *, interval_s: float = 30.0) -> ProgressReporter:
        """A reporter for the pod it runs in: the ServiceAccount's token, CA and namespace, the apiserver from
        ``KUBERNETES_SERVICE_HOST``/``_PORT``, the pod's name from ``POD_NAME`` or ``HOSTNAME``, and the job from
        `job` or ``FAULT_AGENT_JOB`` (set it from the job's name, e.g. the downward API's
        ``metadata.labels['volcano.sh/job-name']``).

        Raises:
            ValueError: no job given, or not in a pod (no service host, token or namespace).
        """
        job = job or os.environ.get("FAULT_AGENT_JOB", "")
        if not job:
            raise ValueError("no job name: pass job= or set FAULT_AGENT_JOB")
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise ValueError("not in a pod: KUBERNETES_SERVICE_HOST is not set")
        token_file = SERVICE_ACCOUNT_DIR / "token"
        namespace = (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip()
        pod = os.environ.get("POD_NAME") or os.environ.get("HOSTNAME", "")
        server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        return cls(
            job, namespace, pod, server=server, token=lambda: token_file.read_text().strip(),
            ca_file=str(SERVICE_ACCOUNT_DIR / "ca.crt"), interval_s=interval_s,
        )  # fmt: skip

    # --- what the training loop calls: no I/O ---

    def step(self, step: int, *, checkpoint_step: int | None = None) -> None:
        """Training step `step` (completed steps, ≥ 0) is done; `checkpoint_step`: the last complete checkpoint's
        step, when it changed. The step time is a moving average of the time between calls with growing steps."""
        now = self._monotonic()
        with self._lock:
            if self._step is not None and self._step_at is not None and step > self._step:
                per_step = (now - self._step_at) / (step - self._step)
                old = self._step_time_s
                self._step_time_s = per_step if old is None else old + _STEP_TIME_WEIGHT * (per_step - old)
            if step != self._step:
                self._step, self._step_at = step, now
            if checkpoint_step is not None:
                self._checkpoint_step = checkpoint_step

    def rank_step_times(self, seconds: Sequence[float]) -> None:
        """The seconds per step each pod rank spent computing since the last call, in pod-rank order (entry ``i``:
        the pod whose ``hccl/rankIndex`` is ``i``, the slowest training process of that pod; time spent waiting in
        collectives left out), for straggler detection (jobs labelled ``fault-agent.io/straggler``). Written with
        the next heartbeat as ``fault-agent.io/rank-step-times-s``; no extra write. No I/O.

        Raises:
            ValueError: an empty list, or an entry that is not a finite positive number.
        """
        values = tuple(float(s) for s in seconds)
        if not values or not all(v > 0 and v != float("inf") for v in values):
            raise ValueError("rank step times must be a non-empty list of positive finite seconds")
        with self._lock:
            self._rank_step_times = values

    def checkpoint_started(self) -> None:
        """A checkpoint is being written (the agent waits longer before calling the job hung); written at once."""
        with self._lock:
            self._checkpointing = True
        self.flush()

    def checkpoint_done(self, step: int) -> None:
        """The checkpoint of step `step` is complete; written at once."""
        with self._lock:
            self._checkpointing = False
            self._checkpoint_step = step
        self.flush()

    # --- writing ---

    def start(self) -> ProgressReporter:
        """Start the daemon thread that writes every `interval_s` seconds (a first write at once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fault-agent-progress", daemon=True)
            self._thread.start()
        return self

    def close(self, *, final_write: bool = True) -> None:
        """Stop the thread; with `final_write`, write the last values once more (failures ignored)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 10)
            self._thread = None
        if final_write:
            self.flush()

    def flush(self) -> bool:
        """Write the Lease now; True when it was written. Never raises (see the module docstring)."""
        try:
            self.write()
        except ProgressError as e:
            self.failures += 1
            if e.status not in self._reported:
                self._reported.add(e.status)
                print(f"fault-agent progress: writing Lease {self.namespace}/{self.name} failed: {e}", file=sys.stderr)
            return False
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            self.flush()
            self._stop.wait(self.interval_s)

    def body(self) -> dict[str, Any] | None:
        """The Lease as it would be written now (None before the first step)."""
        with self._lock:
            if self._step is None:
                return None
            annotations = {STEP_ANNOTATION: str(self._step), CHECKPOINTING_ANNOTATION: str(self._checkpointing).lower()}
            if self._step_time_s is not None:
                annotations[STEP_TIME_ANNOTATION] = f"{self._step_time_s:.6g}"
            if self._checkpoint_step is not None:
                annotations[CHECKPOINT_STEP_ANNOTATION] = str(self._checkpoint_step)
            if self._rank_step_times is not None:
                annotations[RANK_STEP_TIMES_ANNOTATION] = ",".join(f"{t:.4g}" for t in self._rank_step_times)
        renew = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {PROGRESS_LABEL: PROGRESS_LEASE, LEASE_JOB_LABEL: self.job},
                "annotations": annotations,
            },
            "spec": {
                "holderIdentity": self.pod,
                "leaseDurationSeconds": max(1, round(3 * self.interval_s)),
                "renewTime": renew,
            },
        }

    def write(self) -> bool:
        """Write the Lease once: a JSON merge patch, or a create when it does not exist yet. False before the
        first step (nothing to say).

        Raises:
            ProgressError: the apiserver refused the write or could not be reached.
        """
        body = self.body()
        if body is None:
            return False
        path = f"/apis/coordination.k8s.io/v1/namespaces/{urllib.parse.quote(self.namespace)}/leases"
        try:
            self._request("PATCH", f"{path}/{urllib.parse.quote(self.name)}", body, "application/merge-patch+json")
        except ProgressError as e:
            if e.status != 404:
                raise
            try:
                self._request("POST", path, body, "application/json")
            except ProgressError as created:
                if created.status != 409:  # someone created it in between: patch it
                    raise
                self._request("PATCH", f"{path}/{urllib.parse.quote(self.name)}", body, "application/merge-patch+json")
        self.writes += 1
        return True

    def _request(self, method: str, path: str, body: dict[str, Any], content_type: str) -> None:
        token = self._token() if callable(self._token) else self._token
        req = urllib.request.Request(
            self._server + path,
            data=json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {token}", "Content-Type": content_type, "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=10) as answer:
                answer.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode(errors="replace")
            raise ProgressError(e.code, detail) from e
        except (urllib.error.URLError, OSError) as e:
            raise ProgressError(0, str(e)) from e
