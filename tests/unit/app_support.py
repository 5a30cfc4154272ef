"""Shared fakes for the RecoveryEngine unit tests (test_app_*.py): a writer that answers at once, and an
event sink that keeps a list (records, faults and watch changes: tests/support/factories.py). Not a test module."""

from __future__ import annotations

import asyncio
from typing import Any

from agent.actions import ActionResult, ClusterWriter, JobRef, Outcome, PodRef
from agent.sinks import events as ev


class InstantWriter(ClusterWriter):
    """Answers at once without an apiserver: incident annotations written, rings-config already reset, no pods
    listed, job version "0". Tests subclass it and override what they observe (the RestartJob Command, …)."""

    async def annotate_job(self, job: JobRef, annotations: Any, *, incident: str) -> ActionResult:
        return ActionResult("annotate-job", str(job), Outcome.DONE)

    async def claim_job(self, job: JobRef, annotations: Any, *, resource_version: str, incident: str) -> ActionResult:
        return await self.annotate_job(job, annotations, incident=incident)  # no conflicts here

    async def reset_rings_config(self, namespace: str, job_name: str, *, incident: str) -> ActionResult:
        return ActionResult("reset-rings", job_name, Outcome.ALREADY_DONE)

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        return []  # force mode lists the pods to delete after the Command; none to delete here

    async def job_version(self, job: JobRef) -> str | None:
        return "0"

    async def annotate_node(self, node: str, annotations: Any, *, incident: str = "") -> ActionResult:
        return ActionResult("annotate-node", f"Node/{node}", Outcome.DONE)


class ListSink:
    """An event sink (agent.app.EventSink) that keeps the events in submission order; each is durable at once."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def submit(self, event: Any) -> asyncio.Future[None]:
        self.events.append(event)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def types(self) -> list[str]:
        """The CloudEvents types, in order."""
        return [ev.as_json(e)["type"] for e in self.events]
