"""The jobs each fault hit, remembered on every replica: its ``fault.cleared`` goes to each of them (even after
their pods left the node), and a new leader republishing an adopted incident's events knows its faults."""

from __future__ import annotations

import functools
from collections.abc import Awaitable

from agent.core.correlate import Correlation
from agent.core.faults import Fault, FaultCleared, ObjectRef, fault_identity
from agent.engine.context import EngineContext, durable
from agent.engine.views import job_object
from agent.sinks import events as ev

_FAULT_JOBS_KEPT = 10000
"""Faults whose jobs are remembered for their fault.cleared (a fault that never clears is forgotten last)."""


class FaultJobs:
    """fault identity -> the jobs it hit when detected (uid -> job), bounded: the oldest entries go first."""

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self.jobs: dict[tuple[object, ...], dict[str, ObjectRef]] = {}

    def remember(self, fault: Fault, correlation: Correlation) -> None:
        """Note the jobs `fault` hits now (what its fault.detected events name), for its fault.cleared:
        `correlation` is the fault correlated against the state as it is now (the recovery loop's, made once)."""
        hits = correlation.hits
        if not hits:
            return
        jobs = self.jobs.setdefault(fault_identity(fault), {})
        jobs.update((hit.job.uid, job_object(hit.job)) for hit in hits)
        while len(self.jobs) > _FAULT_JOBS_KEPT:
            del self.jobs[next(iter(self.jobs))]

    def hit(self, fault: Fault, job_uid: str) -> bool:
        """Whether `fault` hit the job `job_uid` when it was detected."""
        return job_uid in self.jobs.get(fault_identity(fault), {})

    async def publish_cleared(self, cleared: FaultCleared) -> Awaitable[None]:
        """One fault.cleared per job the fault hit (when detected, or now, or as a job's incident lists it: a
        predecessor restarted the job for it), keyed by the job's UID like its fault.detected, naming the job's open
        incident; a node event when it hit no job, or when this replica published it as one. Returns what is done
        once all of them are durable (the last one's commit: commits complete in order).

        Each clear follows its fault.detected in the job's (or node's) stream. When this replica never published
        that fault.detected (a predecessor did, and its copy may still wait in that replica's outbox, or never
        leave it), it publishes it first, with the same deterministic id: otherwise a predecessor's late copy
        would reach Kafka after the clear that ends it."""
        ctx = self.ctx
        state = ctx.state
        jobs = dict(self.jobs.pop(fault_identity(cleared.fault), {}))
        pod = cleared.fault.pod
        record = state.pods.get(f"{pod.namespace}/{pod.name}") if pod is not None else None
        link = record.job if record is not None else None
        job = state.job(link.kind, link.namespace, link.name) if link is not None else None
        if job is not None:
            jobs.setdefault(job.uid, job_object(job))
        for incident in ctx.store.naming(cleared.fault):  # it joined the incident: its fault.detected named the job
            jobs.setdefault(
                incident.job_uid, ObjectRef(incident.kind, incident.namespace, incident.name, incident.job_uid)
            )
        cluster = ctx.settings.cluster_name
        fault = cleared.fault
        refs = sorted(jobs.values(), key=lambda j: (j.namespace, j.name, j.uid))
        fid = ev.fault_id(fault, cluster=cluster)

        async def ended(subject: str, job: ObjectRef | None, guess: str | None) -> str | None:
            """The incident link of the fault.detected the clear for `subject` ends: the last one published here,
            else (a predecessor's) `guess`, published first with that link."""
            if (fid, subject) in ctx.detected_links:
                return ctx.detected_links.pop((fid, subject))
            await ctx.submit(functools.partial(ev.fault_detected, fault, cluster=cluster, job=job, incident_id=guess))
            ctx.detected_links.pop((fid, subject), None)
            return guess

        node = f"node/{fault.node}"
        if not refs or (fid, node) in ctx.detected_links:  # a node event (it hit no job when this replica saw it)
            await ended(node, None, None)  # its fault.detected names no incident (nothing acts on it)
            node_done = await ctx.submit(lambda: ev.fault_cleared(cleared, cluster=cluster))
            if not refs:
                return node_done
        done: Awaitable[None] = durable()
        for ref in refs:
            current = ctx.store.incident(ref.uid)
            incident_id = current.id if current is not None and current.phase.open else None
            # a predecessor's fault.detected named the job's incident when the fault joined it (open or closed
            # since), and none otherwise
            guess = current.id if current is not None and current.may_hold(fault) else None
            detected_link = await ended(f"{ref.namespace}/{ref.name}", ref, guess)
            build = functools.partial(ev.fault_cleared, cleared, cluster=cluster, incident_id=incident_id, jobs=refs)
            done = await ctx.submit(functools.partial(build, job=ref, detected_incident_id=detected_link))
        return done
