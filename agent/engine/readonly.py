"""The writer port in observe mode: every read passes through, every write is refused before it is sent.

:class:`agent.engine.recovery.RecoveryEngine` wraps its writer in :class:`ReadOnlyWriter` when ``policy.mode`` is
``observe``, so no path of the engine (restarts, pod deletions, rings-config or reset-config, MindCluster's
bookkeeping ConfigMaps, claims and the job records, taints and node annotations, resubmissions, the breaker
ConfigMap) can reach the cluster, whatever it decides. The engine plans no restart in observe mode; the quarantine
and breaker paths still run as in dry-run (they say once what they would have written). A refused write is logged,
counted by :attr:`ReadOnlyWriter.refused`, and answered like a dry-run write (``dry_run`` results, ``dry_run`` is
True), which every caller already handles.

The port (:class:`~agent.engine.ports.ClusterWriterPort`) is the list: a member named in :data:`READS` passes
through, every other member the port declares returning an :class:`~agent.actions.ActionResult` is refused by
:meth:`ReadOnlyWriter.__getattr__` with no code here (action: its name with dashes; target: its first argument), and
the two writes that answer otherwise (``write_breaker``, ``finish_resubmission``) are written out below. A method
the port does not declare raises :class:`WriteRefused` when called; tests/unit checks every member of the port is
either a read or refused.
"""

from __future__ import annotations

import functools
import typing
from typing import Any

import structlog

from agent.actions import ActionResult, Outcome
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


@functools.cache
def refused_by_result(name: str) -> bool:
    """Whether `name` is a member of the port that returns an :class:`ActionResult` (refused with a DRY_RUN one)."""
    member = getattr(ClusterWriterPort, name, None)
    if member is None or name.startswith("_") or not callable(member):
        return False
    return typing.get_type_hints(member).get("return") is ActionResult


def _target(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """What a refused write was about, for its log line: its `target` argument, else its leading text arguments
    joined by "/" (namespace/name), else its first argument (a job, a pod; a list of them joined by ",")."""
    if kwargs.get("target"):
        return str(kwargs["target"])
    texts = []
    for arg in args:
        if not isinstance(arg, str):
            break
        texts.append(arg)
    if texts:
        return "/".join(texts)
    if not args:
        return ""
    first = args[0]
    return ",".join(str(x) for x in first) if isinstance(first, list | tuple) else str(first)


class ReadOnlyWriter:
    """A :class:`~agent.engine.ports.ClusterWriterPort` that sends no write.

    Args:
        inner: the real writer; only its reads are called.
    """

    def __init__(self, inner: ClusterWriterPort) -> None:
        self.inner = inner
        self.refused: dict[str, int] = {}  # write action -> refusals (tests read it)

    @property
    def dry_run(self) -> bool:
        """Always True: every caller treats the refused writes as a shadow mode's."""
        return True

    def _refuse(self, action: str, target: str, incident: str) -> ActionResult:
        self.refused[action] = self.refused.get(action, 0) + 1
        log.info("observe mode: write not sent", action=action, target=target, incident=incident)
        return ActionResult(action, target, Outcome.DRY_RUN, "observe mode (policy.mode=observe): not written")

    def __getattr__(self, name: str) -> Any:
        """A port member this class does not define: a read listed in :data:`READS` goes to the inner writer, a
        write the port declares returning an :class:`ActionResult` is refused with a DRY_RUN one, anything else
        raises :class:`WriteRefused` when called."""
        if name in READS:
            return getattr(self.inner, name)
        if name.startswith("_"):
            raise AttributeError(name)
        if refused_by_result(name):

            async def refuse(*args: Any, **kwargs: Any) -> ActionResult:
                return self._refuse(name.replace("_", "-"), _target(args, kwargs), str(kwargs.get("incident", "")))

            return refuse

        async def refused(*args: Any, **kwargs: Any) -> Any:
            self.refused[name] = self.refused.get(name, 0) + 1
            log.error("observe mode: unknown write refused", action=name)
            raise WriteRefused(f"{name}: observe mode (policy.mode=observe) sends no write")

        return refused

    # ------------------------------------------------------------------ writes that answer other than a result

    async def finish_resubmission(self, pending: PendingResubmission) -> tuple[Leftover, ActionResult, dict[str, str]]:
        # what to do is not even looked at: the engine writes nothing in observe mode, a record included
        return Leftover.OLD_EXISTS, self._refuse("resubmit-recover", str(pending), pending.incident), {}

    async def write_breaker(self, settings: Settings, data: dict[str, str]) -> bool:
        self._refuse("write-breaker", f"ConfigMap/{settings.leader.namespace}/{settings.policy.breaker_configmap}", "")
        return False
