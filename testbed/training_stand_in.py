"""A stand-in for a job's training processes on the testbed: reads ``reset-config-<job>`` and acknowledges as
MindCluster's training side does. Test helper code only; nothing in the agent imports it.

What the real processes do (component/taskd, read at commit 22bb3d98): TaskD's manager in each pod reads the
mounted ``reset.json`` (taskd/python/toolkit/fault_checker/fault_check.py ``get_reset_info_from_cm``: the keys
``RankList``, ``RetryTime``, ``GracefulExit``, ``FaultFlushing``, ``RestartFaultProcess`` and the sibling file
``restartType``) and, in its loop (taskd/python/framework/agent/ms_mgr/msrun_plugin.py):

- ``GracefulExit == 1`` (``_handle_grace_exit``): SIGTERM to the training workers (they save the dying-gasp
  checkpoint), then stop them; the manager itself keeps running, so the pod stays. The stand-in marks each pod of
  the job not Ready (its processes are gone, the container stays), the way a readiness probe on the training
  process would show it; with ``exits=False`` it does nothing (processes that hang).
- ``RetryTime`` grown with an empty ``RankList`` (``_handle_process_retry_fault``: the single-pod rescheduling
  case): kill the workers and start them again once the rank table is fresh. The stand-in records one restart
  per pod of the job that it sees Running at that moment, and a pod it had marked not Ready is Ready again.

It reads ``reset.json`` with :func:`json.loads` as TaskD does, not with the agent's parser, and records what it
saw so a test can assert on it. It polls (every 0.1 s) rather than watches: simpler, and the testbed is small.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

VOLCANO_JOB_LABEL = "volcano.sh/job-name"
_STRATEGIC: dict[str, Any] = {"_content_type": "application/strategic-merge-patch+json"}


@dataclass
class Seen:
    """What the stand-in saw and did, in order; `at` values are ``time.monotonic()``."""

    payloads: list[dict[str, Any]] = field(default_factory=list)  # each distinct reset.json, parsed
    grace_exits: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)  # (at, pods it exited)
    restarts: list[tuple[float, int, tuple[str, ...]]] = field(default_factory=list)  # (at, RetryTime, pods)
    graceful_exit: list[tuple[float, int]] = field(default_factory=list)  # (at, GracefulExit) as it changed


class TrainingStandIn:
    """Stands in for the training processes of the Volcano Job `job` in `namespace` (see the module docstring).

    Args:
        api: a logged-in kubernetes_asyncio ApiClient (admin).
        exits: on ``GracefulExit`` 1, the processes exit (pods turn not Ready); False: they hang.
        poll_s: seconds between reads.
    """

    def __init__(
        self, api: k8s.ApiClient, namespace: str, job: str, *, exits: bool = True, poll_s: float = 0.1
    ) -> None:
        self.core = k8s.CoreV1Api(api)
        self.namespace = namespace
        self.job = job
        self.exits = exits
        self.poll_s = poll_s
        self.seen = Seen()
        self._task: asyncio.Task[None] | None = None
        self._last_text: str | None = None
        self._retry_time: int | None = None
        self._graceful_exit = 0

    async def __aenter__(self) -> TrainingStandIn:
        self._task = asyncio.create_task(self._run(), name=f"stand-in:{self.job}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                await self._step()
            except ApiException as e:
                if e.status != 404:
                    raise
            await asyncio.sleep(self.poll_s)

    async def _step(self) -> None:
        cm = await self.core.read_namespaced_config_map(f"reset-config-{self.job}", self.namespace)
        text = (cm.data or {}).get("reset.json")
        if text is None or text == self._last_text:
            return
        self._last_text = text
        payload = json.loads(text)
        self.seen.payloads.append(payload)
        retry_time = payload.get("RetryTime", 0)
        graceful_exit = payload.get("GracefulExit", 0)
        if graceful_exit != self._graceful_exit:
            self._graceful_exit = graceful_exit
            self.seen.graceful_exit.append((time.monotonic(), graceful_exit))
            if graceful_exit == 1 and self.exits:
                exited = await self._exit_processes()
                self.seen.grace_exits.append((time.monotonic(), exited))
        if self._retry_time is not None and retry_time > self._retry_time and not payload.get("RankList"):
            running = [p for p in await self._pods() if p.status.phase == "Running"]
            for pod in running:  # workers started again: a pod whose processes had exited is Ready again
                if not _ready(pod):
                    await self._set_ready(pod, True, "TrainingRestarted")
            self.seen.restarts.append((time.monotonic(), retry_time, tuple(p.metadata.name for p in running)))
        self._retry_time = retry_time

    async def _pods(self) -> list[k8s.V1Pod]:
        pods = await self.core.list_namespaced_pod(self.namespace, label_selector=f"{VOLCANO_JOB_LABEL}={self.job}")
        return [p for p in pods.items if not p.metadata.deletion_timestamp]

    async def _exit_processes(self) -> tuple[str, ...]:
        """The workers saved their checkpoint and exited; the container (TaskD's manager) stays: each Running
        pod's Ready and ContainersReady conditions turn False and its containers report not ready."""
        names: list[str] = []
        for pod in await self._pods():
            if pod.status.phase == "Running":
                await self._set_ready(pod, False, "TrainingExited")
                names.append(pod.metadata.name)
        return tuple(names)

    async def _set_ready(self, pod: k8s.V1Pod, ready: bool, reason: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = "True" if ready else "False"
        statuses = [
            {"name": c.name, "ready": ready, "restartCount": 0, "image": c.image or "", "imageID": "",
             "state": {"running": {"startedAt": now}}}
            for c in pod.spec.containers
        ]  # fmt: skip
        conditions = [
            {"type": "Ready", "status": status, "lastTransitionTime": now, "reason": reason},
            {"type": "ContainersReady", "status": status, "lastTransitionTime": now, "reason": reason},
        ]
        body = {"status": {"containerStatuses": statuses, "conditions": conditions}}
        await self.core.patch_namespaced_pod_status(pod.metadata.name, self.namespace, body, **_STRATEGIC)


def _ready(pod: k8s.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
