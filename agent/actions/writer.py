"""The agent's only cluster writer: restarts, pod deletions, rings-config reset, quarantine taints, job records.

:class:`ClusterWriter` is assembled from one class per topic, each in its module under agent.actions.writes:
``base`` (the edge to the client, the fence, the retries, the one mapping of a failed request to a result),
``jobs`` (the RestartJob Command, the job reads), ``pods`` (list, read back, delete, mark), ``nodes`` (taints and
the hold annotation), ``configmaps`` (MindCluster's bookkeeping, rings-config, reset-config, the job records, the
breaker's) and ``resubmit``. Each topic implements its port of agent.engine.ports.

Every write is safe to repeat: 404 and 409 (and a failed UID precondition, which the apiserver reports as 409)
mean "already done"; pod deletions carry a UID precondition so a replacement pod with the same name is never
hit; retriable failures (429, 5xx, connection errors) are retried a few times with jittered backoff, honouring
``Retry-After``. Each write logs one line with the incident id. In dry-run (shadow) mode nothing is sent: the
result is ``dry_run`` and the line says what would have been written.

Resubmission (only when ``policy.resubmit_limit`` > 0) deletes a Failed job (UID precondition) and creates it
again from its own spec with lineage annotations (agent.core.incidents ``RESUBMITTED_FROM_ANNOTATION``,
``RESUBMIT_COUNT_ANNOTATION``); see :meth:`ClusterWriter.resubmit_job`. The body is recorded in a ConfigMap of
the agent's namespace before the delete (agent.core.resubmission), so a resubmission cut short after it is finished
by the leader (:meth:`ClusterWriter.finish_resubmission`) instead of losing the job.

Fencing (agent.core.fence): with a `fence` (the elector's remaining leadership, seconds), every write first asks it
and raises :class:`~agent.core.fence.NotLeader` instead of sending when nothing is left; the request's deadline is
cut to what is left. Reads are not fenced. :meth:`ClusterWriter.claim_record` is the precondition-carrying write
that comes before any restart; it and every other write of the agent's incident state go to the job's record, a
ConfigMap in the agent's namespace (agent.core.records), never to the job object: the only writes on a job are the
restart itself (RestartJob Command, pod deletions) and a resubmission's delete and create.

Formats: Volcano ``bus.volcano.sh/v1alpha1`` Command (``action: RestartJob``, ``target`` = owner reference to
the Job); ``rings-config-<job>`` ConfigMap key ``hccl.json`` (MindCluster, shared/DOMAIN.md §2).
"""

from __future__ import annotations

from agent.actions.writes.base import ApiEdge, error_detail
from agent.actions.writes.configmaps import RINGS_INITIALIZING, RINGS_KEY, ConfigMapWrites
from agent.actions.writes.jobs import (
    ASCEND_GROUP,
    ASCEND_PLURAL,
    ASCEND_VERSION,
    BUS_GROUP,
    BUS_PLURAL,
    BUS_VERSION,
    INCIDENT_LABEL,
    VOLCANO_GROUP,
    VOLCANO_PLURAL,
    VOLCANO_VERSION,
    JobWrites,
    command_name,
    label_value,
)
from agent.actions.writes.nodes import NodeWrites
from agent.actions.writes.pods import POD_READS_IN_FLIGHT, PodRef, PodWrites, pod_version
from agent.actions.writes.resubmit import ResubmissionWrites, resubmission_body

__all__ = [
    "ASCEND_GROUP",
    "ASCEND_PLURAL",
    "ASCEND_VERSION",
    "BUS_GROUP",
    "BUS_PLURAL",
    "BUS_VERSION",
    "INCIDENT_LABEL",
    "POD_READS_IN_FLIGHT",
    "RINGS_INITIALIZING",
    "RINGS_KEY",
    "VOLCANO_GROUP",
    "VOLCANO_PLURAL",
    "VOLCANO_VERSION",
    "ApiEdge",
    "ClusterWriter",
    "ConfigMapWrites",
    "JobWrites",
    "NodeWrites",
    "PodRef",
    "PodWrites",
    "ResubmissionWrites",
    "command_name",
    "error_detail",
    "label_value",
    "pod_version",
    "resubmission_body",
]


class ClusterWriter(ResubmissionWrites, PodWrites, NodeWrites):
    """Writes to the cluster for the agent (every topic: :class:`ResubmissionWrites` with the job and ConfigMap
    writes, :class:`PodWrites`, :class:`NodeWrites`). One instance per ApiClient; the arguments are
    :class:`agent.actions.writes.base.WriterBase`'s. Implements :class:`agent.engine.ports.ClusterWriterPort`."""
