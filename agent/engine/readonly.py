"""The writer port in observe mode: every read passes through, every write is refused before it is sent.

:class:`agent.engine.recovery.RecoveryEngine` wraps its writer in :class:`ReadOnlyWriter` when ``policy.mode`` is
``observe``, so no path of the engine (restarts, pod deletions, rings-config or reset-config, MindCluster's
bookkeeping ConfigMaps, claims and the job records, taints and node annotations, resubmissions, the breaker
ConfigMap) can reach the cluster, whatever it decides. The engine plans no restart in observe mode; the quarantine
and breaker paths still run as in dry-run (they say once what they would have written). A refused write is logged,
counted by :attr:`ReadOnlyWriter.refused`, and answered like a dry-run write (``dry_run`` results, ``dry_run`` is
True), which every caller already handles. A method the port gains later and this class does not know is refused too
(:meth:`ReadOnlyWriter.__getattr__` raises :class:`WriteRefused`); tests/unit checks every member of
:class:`~agent.engine.ports.ClusterWriterPort` is either a known read or refused here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from agent.actions import ActionResult, Outcome, PodRef
from agent.core.cluster import JobRef
from agent.core.records import JobStateRecord
from agent.core.resetconfig import ResetConfigUpdate
from agent.core.resubmission import Leftover, PendingResubmission
from agent.engine.ports import ClusterWriterPort
from agent.settings import Settings

log = structlog.get_logger(__name__)

READS = frozenset(
    {
        "dry_run",
        "list_job_pods",
        "job_version",
        "pods_remaining",
        "job_meta",
        "read_record",
        "read_breaker",
        "pending_resubmissions",
    }
)
"""The members of :class:`~agent.engine.ports.ClusterWriterPort` that only read; everything else writes."""


class WriteRefused(RuntimeError):
    """A write method :class:`ReadOnlyWriter` does not know was called in observe mode (nothing was sent)."""


class ReadOnlyWriter:
    """A :class:`~agent.engine.ports.ClusterWriterPort` that sends no write.

    Args:
        inner: the real writer; only its reads are called.
    """

    def __init__(self, inner: ClusterWriterPort) -> None:
        self.inner = inner
        self.refused: dict[str, int] = {}  # write method -> refusals (tests and status read it)

    @property
    def dry_run(self) -> bool:
        """Always True: every caller treats the refused writes as a shadow mode's."""
        return True

    def _refuse(self, action: str, target: str, incident: str) -> ActionResult:
        self.refused[action] = self.refused.get(action, 0) + 1
        log.info("observe mode: write not sent", action=action, target=target, incident=incident)
        return ActionResult(action, target, Outcome.DRY_RUN, "observe mode (policy.mode=observe): not written")

    def __getattr__(self, name: str) -> Any:
        """A port member this class does not define: a read listed in :data:`READS` goes to the inner writer,
        anything else is refused (:class:`WriteRefused` when called)."""
        if name in READS:
            return getattr(self.inner, name)
        if name.startswith("_"):
            raise AttributeError(name)

        async def refused(*args: Any, **kwargs: Any) -> Any:
            self.refused[name] = self.refused.get(name, 0) + 1
            log.error("observe mode: unknown write refused", action=name)
            raise WriteRefused(f"{name}: observe mode (policy.mode=observe) sends no write")

        return refused

    # ------------------------------------------------------------------ reads

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        return await self.inner.list_job_pods(job)

    async def job_version(self, job: JobRef) -> str | None:
        return await self.inner.job_version(job)

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        return await self.inner.pods_remaining(pods)

    async def job_meta(self, job: JobRef) -> tuple[str, dict[str, str]] | None:
        return await self.inner.job_meta(job)

    async def read_record(self, job: JobRef) -> JobStateRecord | None:
        return await self.inner.read_record(job)

    async def read_breaker(self, settings: Settings) -> dict[str, str] | None:
        return await self.inner.read_breaker(settings)

    # ------------------------------------------------------------------ writes: refused

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        return self._refuse("restart-command", str(job), incident)

    async def reset_rings_config(self, namespace: str, job_name: str, *, incident: str) -> ActionResult:
        return self._refuse("rings-reset", f"ConfigMap/{namespace}/rings-config-{job_name}", incident)

    async def delete_pod(self, pod: PodRef, *, incident: str, grace_seconds: int | None) -> ActionResult:
        return self._refuse("delete-pod", str(pod), incident)

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        return self._refuse("delete-pods", target or ",".join(p.name for p in pods), incident)

    async def claim_record(
        self, job: JobRef, data: Mapping[str, str], *, resource_version: str, incident: str
    ) -> ActionResult:
        return self._refuse("claim-record", str(job), incident)

    async def update_reset_config(self, update: ResetConfigUpdate, *, incident: str) -> ActionResult:
        return self._refuse(f"reset-config-{update.change}", f"ConfigMap/{update.namespace}/{update.name}", incident)

    async def write_record(self, job: JobRef, data: Mapping[str, str], *, incident: str) -> ActionResult:
        return self._refuse("write-record", str(job), incident)

    async def delete_record(self, job_uid: str, *, incident: str = "") -> ActionResult:
        return self._refuse("delete-record", f"record of job UID {job_uid}", incident)

    async def resubmit_job(
        self, job: JobRef, *, incident: str, count: int, wait_s: float = 30.0, poll_s: float = 0.2
    ) -> ActionResult:
        return self._refuse("resubmit", str(job), incident)

    async def finish_resubmission(self, pending: PendingResubmission) -> tuple[Leftover, ActionResult, dict[str, str]]:
        # what to do is not even looked at: the engine writes nothing in observe mode, a record included
        return Leftover.OLD_EXISTS, self._refuse("resubmit-recover", str(pending), pending.incident), {}

    async def forget_resubmission(self, from_uid: str, *, incident: str) -> ActionResult:
        return self._refuse("resubmit-forget", f"ConfigMap/{from_uid}", incident)

    async def annotate_node(
        self, node: str, annotations: Mapping[str, str | None], *, incident: str = ""
    ) -> ActionResult:
        return self._refuse("annotate-node", f"Node/{node}", incident)

    async def annotate_pod(self, pod: PodRef, annotations: Mapping[str, str], *, incident: str) -> ActionResult:
        return self._refuse("annotate-pod", str(pod), incident)

    async def taint_node(self, node: str, *, key: str, value: str, incident: str = "") -> ActionResult:
        return self._refuse("taint", f"Node/{node}", incident)

    async def untaint_node(self, node: str, *, key: str, incident: str = "") -> ActionResult:
        return self._refuse("untaint", f"Node/{node}", incident)

    async def write_breaker(self, settings: Settings, data: dict[str, str]) -> bool:
        self._refuse("write-breaker", f"ConfigMap/{settings.leader.namespace}/{settings.policy.breaker_configmap}", "")
        return False

    async def update_configmap_keys(
        self,
        namespace: str,
        name: str,
        update: Callable[[Mapping[str, str]], Mapping[str, str]],
        *,
        incident: str,
        tries: int = 5,
        annotations: Mapping[str, str] | None = None,
    ) -> ActionResult:
        return self._refuse("update-configmap", f"ConfigMap/{namespace}/{name}", incident)
