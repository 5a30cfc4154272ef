"""The cluster state: slim records of every watched object, their indexes, and the readiness flag.

One store per source (``pods``, ``nodes``, ``deviceinfo``, ``nodeinfo``, ``faultconfig``, ``clusterinfo``,
``publicfault``, ``vcjobs``, ``acjobs``, ``jobsets``, ``podgroups``, ``jobrecords``: the agent's own job records,
agent.core.records; ``resourceslices`` and ``resourceclaims``: DRA, agent.core.dra), keyed ``namespace/name``
(``name`` for cluster-scoped kinds).
:meth:`ClusterState.apply` is the only writer: the watch engine computes a :class:`~agent.kube.watch.Change`
and the state applies it to the store and every index in one step, so the indexes are consistent after each
change.

Indexes (each one the engine or the detectors read): pods by node, pods by job, device-plugin and NodeD
ConfigMaps by node, PodGroups by their owner job's UID, the job records by job UID (with their
resourceVersion) and the pods' ``version`` labels per AscendJob. The jobs whose deletion a watch reported are
kept in :attr:`ClusterState.gone_jobs` until the engine takes them (it deletes their records). Chips held by a
pod are on its record.

What a tick reads is bounded by what changed: each part that looks at jobs on a timer follows them
(:meth:`ClusterState.follow_jobs`, a :class:`JobTouches` per reader) and reads only the jobs touched since its last
tick; :meth:`ClusterState.job_position` gives the order a scan of :meth:`ClusterState.job_stores` would visit them in.

An AscendJob's restart counter lives on its pods only: the Ascend Operator keeps it in memory, stamps it on every
pod it creates as the ``version`` label and bumps it at each deleted pod of the current version, whoever deleted
it (component/ascend-operator/pkg/controllers/v1/ascendjob_controller.go ``onPodDeleteFunc``, labels.go). So the
state fills in each AscendJob record's ``version`` and ``retry_count`` from its pods (:func:`ascend_pod_version`)
whenever the job or one of its pods changes; the record's resourceVersion stays the job's, so a relist sees no
change. Likewise a job's fault-tolerance settings are read from its PodGroup's labels merged with its pod
templates' (agent.core.job_labels.job_view, MindCluster ``plugin/job.go`` ``getJobLabelFromVcJob``) whenever the
job or its PodGroup changes (:meth:`ClusterState.podgroup_of`).

Readiness: :meth:`expect` names every watcher whose first list must complete; :attr:`ready` turns True only
when each has delivered its LISTED marker. No fault may be decided before that.
This module does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from agent.core.cluster import (
    NODE_SN_ANNOTATION,
    ConfigMapRecord,
    JobKey,
    JobKind,
    JobRecord,
    NodeRecord,
    PodGroupRecord,
    PodRecord,
)
from agent.core.detect.deviceinfo import DEVICE_INFO_PREFIX, node_of
from agent.core.detect.nodeinfo import NODE_INFO_PREFIX
from agent.core.dra import NO_ALLOCATIONS, DeviceAllocations, ResourceClaimRecord, ResourceSliceRecord
from agent.core.job_labels import job_view
from agent.core.progress import LEASE_PREFIX, LeaseRecord
from agent.core.records import JobStateRecord, from_configmap
from agent.kube.watch import Change, ChangeType
from agent.sources.catalog import CATALOG, SOURCE_NAMES

SOURCES = SOURCE_NAMES
"""The sources the state keeps a store of (agent.sources.catalog)."""
JOB_SOURCES = ("vcjobs", "acjobs", "jobsets")
"""The sources that hold training jobs (Volcano Jobs, AscendJobs, JobSets)."""
_JOB_SOURCE = {JobKind.VOLCANO: "vcjobs", JobKind.ASCEND: "acjobs", JobKind.JOBSET: "jobsets"}
_UID_SUFFIX = 37  # "-" and a UID: a PodGroup named <job>-<uid>
GONE_JOBS_KEPT = 10000
"""How many deleted jobs :attr:`ClusterState.gone_jobs` keeps until the engine takes them (oldest dropped; the
sweep at the start of a leadership term finds any record left behind)."""


class UnknownSource(ValueError):
    """A change named a source the state does not keep (a wiring bug)."""


class JobTouches:
    """The jobs touched since its reader last took them, as ``(namespace, name)`` (any job kind of that name): a job
    added, changed (its PodGroup's labels and an AscendJob's restart counter included) or deleted; with `related`,
    also a pod of it added, deleted, or changed in more than its status heartbeat (:func:`_pod_moved`), or a heartbeat
    Lease naming it (by its ``fault-agent.io/job`` label or by its name, agent.core.progress.lease_name). One reader
    each (:meth:`ClusterState.follow_jobs`); bounded by the jobs touched between two takes."""

    __slots__ = ("keys", "related")

    def __init__(self, related: bool) -> None:
        self.related = related
        self.keys: set[tuple[str, str]] = set()

    def take(self) -> set[tuple[str, str]]:
        """The jobs touched since the last call; forgotten here."""
        keys, self.keys = self.keys, set()
        return keys


class ClusterState:
    """Stores and indexes of the watched cluster. Not thread-safe; one event loop writes it."""

    def __init__(self) -> None:
        self.pods: dict[str, PodRecord] = {}
        self.nodes: dict[str, NodeRecord] = {}
        self.device_info: dict[str, ConfigMapRecord] = {}
        self.node_info: dict[str, ConfigMapRecord] = {}
        self.fault_config: dict[str, ConfigMapRecord] = {}
        self.cluster_info: dict[str, ConfigMapRecord] = {}
        self.public_fault: dict[str, ConfigMapRecord] = {}
        self.vcjobs: dict[str, JobRecord] = {}
        self.acjobs: dict[str, JobRecord] = {}
        self.jobsets: dict[str, JobRecord] = {}
        self.podgroups: dict[str, PodGroupRecord] = {}
        self.job_records: dict[str, ConfigMapRecord] = {}
        self.leases: dict[str, LeaseRecord] = {}  # heartbeat Leases (agent.core.progress) by namespace/name
        self.resource_slices: dict[str, ResourceSliceRecord] = {}  # DRA ResourceSlices by name (agent.core.dra)
        self.resource_claims: dict[str, ResourceClaimRecord] = {}  # DRA ResourceClaims by namespace/name
        self._allocations: DeviceAllocations | None = NO_ALLOCATIONS  # None: rebuild at the next read
        self._stores: dict[str, dict[str, Any]] = {src.name: getattr(self, src.store) for src in CATALOG}
        self.pods_by_node: dict[str, set[str]] = {}
        self.pods_by_job: dict[JobKey, set[str]] = {}
        self.nodes_by_taint: dict[str, set[str]] = {}  # taint key -> the nodes carrying a taint with that key
        self.device_info_by_node: dict[str, ConfigMapRecord] = {}
        self.node_info_by_node: dict[str, ConfigMapRecord] = {}
        self.podgroups_by_owner: dict[str, set[str]] = {}
        self.records_by_uid: dict[str, JobStateRecord] = {}
        # job UID -> the job whose deletion a watch reported (ordered, bounded): the engine takes them
        self.gone_jobs: dict[str, JobRecord] = {}
        self.ascend_versions: dict[JobKey, dict[int, int]] = {}  # AscendJob -> pod version label -> pods with it
        self._ascend_seen: dict[str, int] = {}  # AscendJob UID -> highest pod version seen (no pod left: still it)
        # (source, key) of each job changed since the last take_changed_jobs -> its record before the first of
        # those changes (None: it did not exist): what the remain-retry-times keeper works from
        self._changed_jobs: dict[tuple[str, str], JobRecord | None] = {}
        # (source, key) of each job changed since the last take_checked_jobs: what the tick's label check reads
        self._jobs_to_check: set[tuple[str, str]] = set()
        self._followers: list[JobTouches] = []  # follow_jobs: every job touch goes to each
        self._related: list[JobTouches] = []  # those of them that also follow pods and Leases
        self._job_seq: dict[tuple[str, str], int] = {}  # (source, key) -> when the key entered its store (job_position)
        self._next_seq = 0
        self.applied = 0  # changes applied so far: a reader that saw the same count saw the same state
        self._expected: set[str] = set()
        self._expected_sources: set[str] = set()  # the sources of _expected (``nodes`` of ``nodes@*``)
        self._listed: set[str] = set()
        self._sources_listed: set[str] = set()  # the expected sources whose expected watchers have all listed

    # ---- readiness ---------------------------------------------------------------------------------

    def expect(self, watcher_id: str) -> None:
        """Require `watcher_id` (``pods@ns``) to finish its first list before the state is ready."""
        self._expected.add(watcher_id)
        source = watcher_id.split("@", 1)[0]
        self._expected_sources.add(source)
        if watcher_id not in self._listed:
            self._sources_listed.discard(source)

    @property
    def ready(self) -> bool:
        """True once every expected watcher has completed a list (False while nothing is expected)."""
        return bool(self._expected) and self._expected <= self._listed

    def expects(self, source: str) -> bool:
        """True when a watcher of `source` (e.g. ``nodes``, from its id ``nodes@*``) is expected to list."""
        return source in self._expected_sources

    def listed(self, source: str) -> bool:
        """True when every expected watcher of `source` has finished a list (a source none is expected of: True)."""
        return source in self._sources_listed or source not in self._expected_sources

    def _note_listed(self, watcher_id: str) -> None:
        """`watcher_id` finished a list: its source counts as listed once every expected watcher of it has."""
        self._listed.add(watcher_id)
        source = watcher_id.split("@", 1)[0]
        if not any(w.split("@", 1)[0] == source for w in self._expected - self._listed):
            self._sources_listed.add(source)

    @property
    def not_listed(self) -> set[str]:
        """Expected watchers that have not finished their first list yet."""
        return self._expected - self._listed

    # ---- the one writer ------------------------------------------------------------------------------

    def store(self, source: str) -> dict[str, Any]:
        """The store of `source` (the watch engine reads it to compute changes; only :meth:`apply` writes).

        Raises:
            UnknownSource: `source` is not one of SOURCES.
        """
        try:
            return self._stores[source]
        except KeyError:
            raise UnknownSource(f"no store for source {source!r}") from None

    def apply(self, change: Change[Any]) -> None:
        """Apply one change to its store and every index.

        Raises:
            UnknownSource: the change names a source not in SOURCES (a wiring bug, not bad input).
        """
        if change.type is ChangeType.LISTED:
            self._note_listed(change.watcher_id)
            return
        if change.type is ChangeType.RESUMED:
            return
        self.applied += 1
        store = self.store(change.source)
        key = change.key
        old = store.get(key)
        if change.source in ("resourceslices", "resourceclaims"):
            self._allocations = None
        new = change.new
        if change.source in JOB_SOURCES:
            self._changed_jobs.setdefault((change.source, key), old)
            self._jobs_to_check.add((change.source, key))
            rec = new if new is not None else old
            if rec is not None:
                self._touch(rec.namespace, rec.name, related_only=False)
            if old is None and change.type is not ChangeType.DELETED:
                self._job_seq[(change.source, key)] = self._next_seq  # a new key goes last in its store
                self._next_seq += 1
            elif change.type is ChangeType.DELETED:
                self._job_seq.pop((change.source, key), None)
        elif change.source == "leases" and self._related:
            for lease in (old, new):
                if lease is not None:
                    if lease.job:
                        self._touch(lease.namespace, lease.job, related_only=True)
                    if lease.name.startswith(LEASE_PREFIX):
                        self._touch(lease.namespace, lease.name[len(LEASE_PREFIX) :], related_only=True)
        if (
            change.source == "pods"
            and old is not None
            and new is not None
            and old.node == new.node
            and old.job == new.job
            and change.type is ChangeType.MODIFIED
        ):
            store[key] = new  # the pod indexes hold the same entries (node, job, its version): no re-index
            if self._related and new.job is not None and _pod_moved(old, new):
                self._touch(new.job.namespace, new.job.name, related_only=True)
            return
        if change.source == "pods" and self._related:  # added, deleted, or moved to another node or job
            for pod in (old, new):
                if pod is not None and pod.job is not None:
                    self._touch(pod.job.namespace, pod.job.name, related_only=True)
        if old is not None:
            self._unindex(change.source, key, old)
        if change.type is ChangeType.DELETED:
            store.pop(key, None)
            if change.source in JOB_SOURCES and old is not None and old.uid:
                self.gone_jobs.pop(old.uid, None)
                self.gone_jobs[old.uid] = old
                while len(self.gone_jobs) > GONE_JOBS_KEPT:
                    del self.gone_jobs[next(iter(self.gone_jobs))]
        else:
            store[key] = new
            self._index(change.source, key, new)
        if change.source == "pods":
            for rec in (old, change.new if change.type is not ChangeType.DELETED else None):
                if rec is not None and rec.job is not None and rec.job.kind is JobKind.ASCEND:
                    self._fill_ascend_counter(f"{rec.job.namespace}/{rec.job.name}")
        elif change.source == "acjobs":
            if change.type is ChangeType.DELETED:
                if old is not None:
                    self._ascend_seen.pop(old.uid, None)
            else:
                self._fill_ascend_counter(key)
        if change.source in JOB_SOURCES and change.type is not ChangeType.DELETED:
            self._read_podgroup_labels(change.source, key)
        elif change.source == "podgroups":
            for pg in (old, change.new if change.type is not ChangeType.DELETED else None):
                if pg is not None:
                    for source, job_key in self._jobs_of_podgroup(pg):
                        self._read_podgroup_labels(source, job_key)

    def _read_podgroup_labels(self, source: str, key: str) -> None:
        """Set the job `key`'s fault-tolerance settings from its PodGroup's labels merged with its pod templates'
        (agent.core.job_labels.job_view; the job's own labels while no PodGroup of it is watched). A change of the
        result counts as a change of the job for :meth:`take_changed_jobs`. The record's resourceVersion stays the
        job's, so a relist sees no change."""
        store = self._stores[source]
        rec = store.get(key)
        if rec is None:
            return
        podgroup = self.podgroup_of(rec)
        if podgroup is None and rec.settings_from == "job":
            return  # as the converter read it: the job's own labels standing in for its PodGroup's
        new = job_view(rec, podgroup)
        if new is not rec:
            self._changed_jobs.setdefault((source, key), rec)
            self._jobs_to_check.add((source, key))
            self._touch(rec.namespace, rec.name, related_only=False)
            store[key] = new

    def _jobs_of_podgroup(self, pg: PodGroupRecord) -> list[tuple[str, str]]:
        """(store, key) of the watched jobs `pg` may belong to (see :meth:`podgroup_of`)."""
        if pg.owner_uid:
            source = _JOB_SOURCE[pg.owner_kind] if pg.owner_kind is not None else "vcjobs"
            return [(source, f"{pg.namespace}/{pg.owner_name}")]
        names = [pg.name]
        if len(pg.name) > _UID_SUFFIX and pg.name[-_UID_SUFFIX] == "-":
            names.append(pg.name[:-_UID_SUFFIX])
        return [(source, f"{pg.namespace}/{n}") for source in ("vcjobs", "acjobs") for n in names]

    def _fill_ascend_counter(self, key: str) -> None:
        """Set the AscendJob `key`'s ``version`` / ``retry_count`` from its pods (module docstring)."""
        rec = self.acjobs.get(key)
        if rec is None:
            return
        current = ascend_pod_version(self.ascend_versions.get((rec.kind, rec.namespace, rec.name), {}))
        seen = self._ascend_seen.get(rec.uid)
        if current is not None:
            self._ascend_seen[rec.uid] = current if seen is None else max(seen, current)
        counter = current if current is not None else seen
        version = "" if counter is None else str(counter)
        if rec.version != version or rec.retry_count != (counter or 0):
            self.acjobs[key] = replace(rec, version=version, retry_count=counter or 0)
            self._touch(rec.namespace, rec.name, related_only=False)

    def _touch(self, namespace: str, name: str, *, related_only: bool) -> None:
        """Tell the readers following jobs (:meth:`follow_jobs`) that job `namespace/name` was touched: all of them,
        or only those following its pods and Leases too (`related_only`)."""
        job = (namespace, name)
        for follower in self._related if related_only else self._followers:
            follower.keys.add(job)

    def _index(self, source: str, key: str, rec: Any) -> None:
        if source == "pods":
            if rec.node:
                self.pods_by_node.setdefault(rec.node, set()).add(key)
            if rec.job is not None:
                self.pods_by_job.setdefault((rec.job.kind, rec.job.namespace, rec.job.name), set()).add(key)
                version = _version_number(rec)
                if version is not None:
                    counts = self.ascend_versions.setdefault((rec.job.kind, rec.job.namespace, rec.job.name), {})
                    counts[version] = counts.get(version, 0) + 1
        elif source == "nodes":
            for taint in rec.taints:
                self.nodes_by_taint.setdefault(taint.key, set()).add(key)
        elif source == "deviceinfo":
            node = node_of(rec.name, DEVICE_INFO_PREFIX)
            if node:
                self.device_info_by_node[node] = rec
        elif source == "nodeinfo":
            node = node_of(rec.name, NODE_INFO_PREFIX)
            if node:
                self.node_info_by_node[node] = rec
        elif source == "podgroups" and rec.owner_uid:
            self.podgroups_by_owner.setdefault(rec.owner_uid, set()).add(key)
        elif source == "jobrecords":
            record = from_configmap(rec)
            if record is not None:
                self.records_by_uid[record.job_uid] = record
        elif source in JOB_SOURCES and rec.uid:
            self.gone_jobs.pop(rec.uid, None)  # there again (a relist): not gone

    def _unindex(self, source: str, key: str, rec: Any) -> None:
        if source == "pods":
            if rec.node:
                _discard(self.pods_by_node, rec.node, key)
            if rec.job is not None:
                _discard(self.pods_by_job, (rec.job.kind, rec.job.namespace, rec.job.name), key)
                version = _version_number(rec)
                job_key = (rec.job.kind, rec.job.namespace, rec.job.name)
                counts = self.ascend_versions.get(job_key)
                if version is not None and counts is not None and version in counts:
                    counts[version] -= 1
                    if counts[version] <= 0:
                        del counts[version]
                    if not counts:
                        del self.ascend_versions[job_key]
        elif source == "nodes":
            for taint in rec.taints:
                _discard(self.nodes_by_taint, taint.key, key)
        elif source == "deviceinfo":
            node = node_of(rec.name, DEVICE_INFO_PREFIX) or ""
            if self.device_info_by_node.get(node) is rec:
                del self.device_info_by_node[node]
        elif source == "nodeinfo":
            node = node_of(rec.name, NODE_INFO_PREFIX) or ""
            if self.node_info_by_node.get(node) is rec:
                del self.node_info_by_node[node]
        elif source == "podgroups" and rec.owner_uid:
            _discard(self.podgroups_by_owner, rec.owner_uid, key)
        elif source == "jobrecords":
            record = from_configmap(rec)
            if record is not None:  # one record per job UID (its name is made from it)
                self.records_by_uid.pop(record.job_uid, None)

    def take_checked_jobs(self) -> set[tuple[str, str]]:
        """The (source, key) of every job (any job source) added, changed or deleted since the last call, and forget
        them: one consumer (agent.engine.job_checks), so that a tick reads only what changed."""
        keys, self._jobs_to_check = self._jobs_to_check, set()
        return keys

    def follow_jobs(self, *, related: bool = False) -> JobTouches:
        """A new reader of the jobs touched from now on (:class:`JobTouches`; `related`: their pods' and heartbeat
        Leases' changes count too). A reader that stops taking keeps at most one entry per job touched."""
        follower = JobTouches(related)
        self._followers.append(follower)
        if related:
            self._related.append(follower)
        return follower

    def job_position(self, kind: JobKind, namespace: str, name: str) -> tuple[int, int]:
        """Where job `namespace/name` of `kind` comes in a scan of :meth:`job_stores` (each store in turn, each in its
        insertion order): sorting by it visits jobs in the order such a scan would. A job not in its store (or put
        there by hand, not by :meth:`apply`) sorts after those of its kind."""
        source = _JOB_SOURCE[kind]
        return JOB_SOURCES.index(source), self._job_seq.get((source, f"{namespace}/{name}"), 1 << 62)

    def take_changed_jobs(self) -> list[tuple[JobRecord | None, JobRecord | None]]:
        """The jobs (Volcano Jobs and AscendJobs: MindCluster's bookkeeping names no JobSet) that changed since the
        last call, each as (its record before the first of those changes, its record now), None for a job that did
        not exist then / does not now; and forget them. One consumer (agent.engine.bookkeeping); a job changed many
        times is one pair."""
        changed, self._changed_jobs = self._changed_jobs, {}
        return [(old, self._stores[source].get(key)) for (source, key), old in changed.items() if source != "jobsets"]

    # ---- queries -------------------------------------------------------------------------------------

    @property
    def device_allocations(self) -> DeviceAllocations:
        """The DRA join of the watched ResourceSlices and ResourceClaims (agent.core.dra), rebuilt on the first
        read after one of them changed; empty when DRA is not watched."""
        if self._allocations is None:
            self._allocations = DeviceAllocations(self.resource_slices.values(), self.resource_claims.values())
        return self._allocations

    def pods_on_node(self, node: str) -> list[PodRecord]:
        """Pods whose spec.nodeName is `node`, in no particular order."""
        return [self.pods[k] for k in self.pods_by_node.get(node, ())]

    def pods_of_job(self, kind: JobKind, namespace: str, name: str) -> list[PodRecord]:
        """Pods linked to the job (by labels or controller ownerReference)."""
        return [self.pods[k] for k in self.pods_by_job.get((kind, namespace, name), ())]

    def job(self, kind: JobKind, namespace: str, name: str) -> JobRecord | None:
        """The Volcano Job, AscendJob or JobSet by namespace/name, or None."""
        return self._stores[_JOB_SOURCE[kind]].get(f"{namespace}/{name}")

    def job_stores(self) -> tuple[dict[str, JobRecord], ...]:
        """The stores of every job kind (Volcano Jobs, AscendJobs, JobSets), keyed namespace/name."""
        return (self.vcjobs, self.acjobs, self.jobsets)

    def job_record(self, job_uid: str) -> JobStateRecord | None:
        """The agent's record of the job with UID `job_uid` as the watch last delivered it, or None."""
        return self.records_by_uid.get(job_uid)

    def podgroup_of(self, job: JobRecord) -> PodGroupRecord | None:
        """`job`'s PodGroup, None when none is watched: the one whose controller ownerReference names the job's
        UID (Volcano and the Ascend Operator set it; named ``<job>-<uid>`` first), else one without a job owner
        named ``<job>-<uid>`` or ``<job>`` in the job's namespace. Reads the state only (no API call)."""
        if not job.uid:
            return None
        named = f"{job.namespace}/{job.name}-{job.uid}"
        keys = [named, *sorted(self.podgroups_by_owner.get(job.uid, ())), f"{job.namespace}/{job.name}"]
        for key in keys:
            pg = self.podgroups.get(key)
            if pg is None:
                continue
            if pg.owner_uid == job.uid or not pg.owner_uid:  # a job-owned one must be this job's, not an earlier one's
                return pg
        return None

    def podgroup_strategy(self, job: JobRecord) -> str | None:
        """The ``ProcessRecoverStrategy`` annotation of `job`'s PodGroup, None when no watched PodGroup of the
        job carries it. A PodGroup is the job's when its controller ownerReference names the job's UID (Volcano
        and the Ascend Operator set it), or, without a job owner, when it is named ``<job>-<uid>`` or ``<job>``
        in the job's namespace. Reads the state only (no API call)."""
        keys = sorted(self.podgroups_by_owner.get(job.uid, ())) if job.uid else []
        keys += [f"{job.namespace}/{job.name}-{job.uid}", f"{job.namespace}/{job.name}"]
        for key in keys:
            pg = self.podgroups.get(key)
            if pg is None or pg.process_recover_strategy is None:
                continue
            if not pg.owner_uid or pg.owner_uid == job.uid:  # a job-owned one must be this job's (not an earlier one's)
                return pg.process_recover_strategy
        return None

    def nodes_tainted(self, key: str) -> set[str]:
        """Names of the nodes carrying a taint with key `key` (any value or effect), as the watch last saw them."""
        return self.nodes_by_taint.get(key, set())

    def node_by_sn(self, serial: str) -> str | None:
        """The name of the node whose ``product-serial-number`` annotation is `serial`, None when none has it
        (MindCluster's public faults may name a node by it: component/clusterd/pkg/domain/node/node_storage.go).
        A scan of the nodes: public faults are rare."""
        for name, rec in self.nodes.items():
            if rec.annotation(NODE_SN_ANNOTATION) == serial:
                return name
        return None

    def check_indexes(self) -> list[str]:
        """Rebuild every index from the stores and list the differences (empty when consistent). For tests."""
        fresh = ClusterState()
        for source, store in self._stores.items():
            for key, rec in store.items():
                fresh._index(source, key, rec)
        problems: list[str] = []
        for name in (
            "pods_by_node",
            "pods_by_job",
            "nodes_by_taint",
            "device_info_by_node",
            "node_info_by_node",
            "podgroups_by_owner",
            "records_by_uid",
            "ascend_versions",
        ):
            mine, theirs = getattr(self, name), getattr(fresh, name)
            if mine != theirs:
                problems.append(f"{name}: have {_short(mine)}, rebuilt {_short(theirs)}")
        return problems


def _version_number(pod: PodRecord) -> int | None:
    """An AscendJob pod's ``version`` label as a number (the operator writes decimal digits), None for another
    job's pod or a label that is absent or not a number (the operator ignores such a pod's deletion too)."""
    link = pod.job
    if link is None or link.kind is not JobKind.ASCEND or not link.version.isdigit():
        return None
    return int(link.version)


def ascend_pod_version(counts: dict[int, int]) -> int | None:
    """The Ascend Operator's restart counter as the job's current pods show it: the highest ``version`` label
    among them (`counts`: version -> pods), None when no pod carries one. Right after a restart the replaced
    pods carry the new value and any pod still terminating the old one."""
    return max(counts) if counts else None


def _pod_moved(old: PodRecord, new: PodRecord) -> bool:
    """Whether a pod's change on the same node and job can change what the readers of :class:`JobTouches` find for
    its job: its phase, UID, deletion, start or rank changed (a status heartbeat or a resourceVersion alone does not
    count: most pod writes are those)."""
    return (
        old.phase != new.phase
        or old.uid != new.uid
        or old.deletion_timestamp != new.deletion_timestamp
        or old.created_at != new.created_at
        or old.rank != new.rank
    )


def _discard(index: dict[Any, set[str]], bucket: Any, key: str) -> None:
    keys = index.get(bucket)
    if keys is None:
        return
    keys.discard(key)
    if not keys:
        del index[bucket]


def _short(d: dict[Any, Any]) -> str:
    items: Iterator[tuple[Any, Any]] = iter(sorted(d.items(), key=repr))
    shown = [f"{k!r}: {v!r}" for _, (k, v) in zip(range(5), items, strict=False)]
    return "{" + ", ".join(shown) + (", …}" if len(d) > 5 else "}")
