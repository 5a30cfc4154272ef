"""Pods → :class:`~agent.core.cluster.PodRecord`.

Reads core/v1 Pod JSON as the apiserver sends it, plus the conventions of DOMAIN.md §1.4: the job link
from Volcano labels (``volcano.sh/job-name``, annotation ``volcano.sh/job-version``), AscendJob labels
(``training.kubeflow.org/job-name``, legacy ``job-name`` + ``group-name: mindxdl.gitee.com``, ``version``)
or the controller ownerReference; chips from ``huawei.com/AscendReal``, else the ``huawei.com/Ascend910``-style
annotation; the rank from ``hccl/rankIndex``.

Watch lines are read by :class:`PodLines` first: msgspec Structs decode only what the converter reads (the parts it
reads as maps, lists or the whole status kept as raw JSON), so a write that changed none of it is skipped after
hashing those raw bytes (:func:`pod_raw_hash`); a list item, or a line it declines, is parsed whole and hashed by
:func:`pod_input_hash`, the same hash of the same parts re-serialised (compact JSON, as the apiserver writes them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
import orjson

from agent.core.cluster import ContainerTermination, JobKind, JobRef, PodRecord
from agent.core.faults import Rejection
from agent.core.jobset import JOBSET_NAME_LABEL, JOBSET_UID_LABEL, RESTART_ATTEMPT_LABEL
from agent.kube.changes import TypedLine
from agent.sources.common import (
    Bad,
    InternCache,
    Metadata,
    controller_owner,
    get_dict,
    get_int,
    get_list,
    get_str,
    intern,
    object_ref,
    parse_time,
)

DEFAULT_CHIP_ANNOTATIONS = ("huawei.com/Ascend910", "huawei.com/npu")
REAL_CHIPS_ANNOTATION = "huawei.com/AscendReal"
"""The chips MindCluster's scheduler plugin really bound (component/ascend-for-volcano/common/util/constants.go
``AscendNPUPodRealUse``); read before the resource-named annotation, as its rescheduler does
(internal/rescheduling/task.go ``getUseCardName``, common/util/util.go ``getActivePodUsedDev``)."""
RANK_ANNOTATION = "hccl/rankIndex"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
"""The pod label MindCluster's master rule reads (``common/util/type.go`` ``ReplicaTypeKey``)."""
FAULT_TYPE_LABEL = "fault-type"
"""ClusterD's pod label naming a fault it found for the pod's task (``component/clusterd/pkg/common/constant/const.go``
``TaskFaultKey``), read by MindCluster's rescheduler (``internal/rescheduling/type.go`` ``taskFaultKey``)."""
NEED_VOLCANO_OPE_ANNOTATION = "needVolcanoOpe"
"""ClusterD's request to the scheduler about this pod during a hot switch (``delete``; MindCluster
``component/ascend-common/api/consts.go`` ``NeedVolcanoOpeKey``)."""
VOLCANO_JOB_LABEL = "volcano.sh/job-name"
VOLCANO_NS_LABEL = "volcano.sh/job-namespace"
VOLCANO_VERSION_ANNOTATION = "volcano.sh/job-version"
KUBEFLOW_JOB_LABEL = "training.kubeflow.org/job-name"
LEGACY_JOB_LABEL = "job-name"
ASCEND_GROUP = JobKind.ASCEND.api_group
ASCEND_VERSION_LABEL = "version"


class PodConverter:
    """Callable raw Pod dict → PodRecord, or a Rejection with a reason slug.

    Args:
        chip_annotations: annotation keys holding the pod's chips, tried in order after
            ``huawei.com/AscendReal`` (the resource prefix is data: ``huawei.com/Ascend910`` on most products,
            ``huawei.com/npu`` on newer ones). An empty annotation is skipped.

    Rejection reasons: ``missing-metadata``, ``wrong-type``, ``bad-timestamp``, ``bad-rank``,
    ``bad-exit-code``.
    """

    def __init__(self, chip_annotations: tuple[str, ...] = DEFAULT_CHIP_ANNOTATIONS) -> None:
        self.chip_annotations = (REAL_CHIPS_ANNOTATION, *(a for a in chip_annotations if a != REAL_CHIPS_ANNOTATION))
        self._chips = InternCache()
        self._links = InternCache()
        self._hashed: dict[str, Any] | None = None  # the object `unchanged` last hashed to a changed write
        self._hash = 0

    def __call__(self, obj: dict[str, Any]) -> PodRecord | Rejection:
        """Convert one pod. Never raises."""
        try:
            return self._convert(obj)
        except Bad as e:
            return Rejection(object_ref(obj, "Pod"), e.reason, e.detail)

    def unchanged(self, obj: dict[str, Any], old: PodRecord) -> bool:
        """True when the raw pod `obj` converts to `old` (apart from its resourceVersion): every part of it this
        converter reads hashes as `old` did (:func:`pod_input_hash`). The watch then skips the write unconverted.
        When it is False the hash is kept for the conversion of the same `obj` that follows (not computed twice)."""
        if old.input_hash == 0:
            return False
        h = pod_input_hash(obj)
        if h == old.input_hash:
            return True
        self._hashed = obj
        self._hash = h
        return False

    def convert_hashed(self, obj: dict[str, Any], input_hash: int) -> PodRecord | Rejection:
        """Convert one pod whose :attr:`~agent.core.cluster.PodRecord.input_hash` was computed by the caller (the
        typed path: :func:`pod_raw_hash` of the line `obj` was built from). Never raises."""
        try:
            return self._record(obj, input_hash)
        except Bad as e:
            return Rejection(object_ref(obj, "Pod"), e.reason, e.detail)

    def _convert(self, obj: dict[str, Any]) -> PodRecord:
        if obj is self._hashed:  # `unchanged` hashed this very object just before
            input_hash = self._hash
            self._hashed = None
        else:
            input_hash = pod_input_hash(obj)
        return self._record(obj, input_hash)

    def _record(self, obj: dict[str, Any], input_hash: int) -> PodRecord:
        m = Metadata(obj, "Pod")
        spec = get_dict(obj, "spec", "pod")
        status = get_dict(obj, "status", "pod")
        ann = m.annotations
        chips: tuple[str, ...] = ()
        for key in self.chip_annotations:
            text = ann.get(key)
            if text:
                chips = self._chip_tuple(text)
                break
        rank: int | None = None
        rank_text = ann.get(RANK_ANNOTATION)
        if rank_text is not None:
            try:
                rank = int(rank_text)
            except ValueError:
                raise Bad("bad-rank", f"annotation {RANK_ANNOTATION}={rank_text[:40]!r} is not an integer") from None
        ready = False
        disruption = ""
        for c in get_list(status, "conditions", "status"):
            if not isinstance(c, dict):
                raise Bad("wrong-type", "status.conditions[] is not an object")
            ctype = c.get("type")
            if ctype == "Ready":
                ready = c.get("status") == "True"
            elif ctype == "DisruptionTarget" and c.get("status") == "True":
                disruption = intern(get_str(c, "reason", "status.conditions[DisruptionTarget]") or "DisruptionTarget")
        status_reason = intern(get_str(status, "reason", "status"))
        if not disruption and status_reason == "Evicted":
            disruption = "Evicted"
        terminations: tuple[ContainerTermination, ...] = ()
        statuses = get_list(status, "containerStatuses", "status")
        if statuses:
            terminations = _terminations(statuses)
        return PodRecord(
            namespace=m.namespace,
            name=m.name,
            uid=m.uid,
            resource_version=m.rv,
            node=intern(get_str(spec, "nodeName", "spec")),
            phase=intern(get_str(status, "phase", "status")),
            ready=ready,
            job=self._job_link(m),
            chips=chips,
            rank=rank,
            terminations=terminations,
            deletion_timestamp=m.deletion,
            disruption=disruption,
            status_reason=status_reason,
            created_at=m.created_at,
            restart_policy=intern(get_str(spec, "restartPolicy", "spec")),
            replica_type=intern(m.labels.get(REPLICA_TYPE_LABEL, "")),
            fault_type=intern(m.labels.get(FAULT_TYPE_LABEL, "")),
            need_volcano_ope=intern(ann.get(NEED_VOLCANO_OPE_ANNOTATION, "")),
            input_hash=input_hash,
        )

    def _chip_tuple(self, text: str) -> tuple[str, ...]:
        cached: tuple[str, ...] | None = self._chips.get(text)
        if cached is not None:
            return cached
        chips = tuple(intern(c.strip()) for c in text.split(",") if c.strip())
        result: tuple[str, ...] = self._chips.put(text, chips)
        return result

    def _job_link(self, m: Metadata) -> JobRef | None:
        labels = m.labels
        owner = controller_owner(m.owners)
        kind: JobKind | None = None
        name = ""
        version = ""
        namespace = m.namespace
        owner_kind = owner.get("kind") if owner else None
        owner_api = owner.get("apiVersion") if owner else None
        if VOLCANO_JOB_LABEL in labels:
            kind = JobKind.VOLCANO
            name = labels[VOLCANO_JOB_LABEL]
            namespace = labels.get(VOLCANO_NS_LABEL) or namespace
            version = m.annotations.get(VOLCANO_VERSION_ANNOTATION, "")
        elif KUBEFLOW_JOB_LABEL in labels or (
            LEGACY_JOB_LABEL in labels and (labels.get("group-name") == ASCEND_GROUP or owner_kind == "AscendJob")
        ):
            kind = JobKind.ASCEND
            name = labels.get(KUBEFLOW_JOB_LABEL) or labels[LEGACY_JOB_LABEL]
            version = labels.get(ASCEND_VERSION_LABEL, "")
        elif JOBSET_NAME_LABEL in labels:
            # JobSet's pods: owned by a batch Job, labelled with the JobSet's name, UID and restart attempt
            kind = JobKind.JOBSET
            name = labels[JOBSET_NAME_LABEL]
            version = labels.get(RESTART_ATTEMPT_LABEL, "")
        elif owner is not None and isinstance(owner_api, str):
            if owner_kind == "Job" and owner_api.startswith("batch.volcano.sh/"):
                kind = JobKind.VOLCANO
            elif owner_kind == "AscendJob" and owner_api.startswith(ASCEND_GROUP + "/"):
                kind = JobKind.ASCEND
            if kind is not None:
                name = get_str(owner, "name", "metadata.ownerReferences[]")
        if kind is None or not name:
            return None
        uid = ""
        if kind is JobKind.JOBSET:
            uid = labels.get(JOBSET_UID_LABEL, "")
        elif owner is not None and owner.get("name") == name:
            uid = get_str(owner, "uid", "metadata.ownerReferences[]")
        key = (kind, namespace, name, uid, version)
        link: JobRef | None = self._links.get(key)
        if link is None:
            link = self._links.put(key, JobRef(kind, intern(namespace), intern(name), intern(uid), intern(version)))
        return link


def pod_input_hash(obj: dict[str, Any]) -> int:
    """A 64-bit hash of every part of the raw pod `obj` that :class:`PodConverter` reads: metadata (uid,
    creation and deletion timestamps, labels, annotations, ownerReferences; name and namespace are the cache key),
    ``spec.nodeName``, ``spec.restartPolicy`` and the whole ``status``. Not the resourceVersion, managedFields or
    the rest of the spec. The maps, lists and the status are hashed as their compact JSON (orjson, keys in the
    object's order), which is the bytes the apiserver sends (Go's encoding/json) for almost every pod, so this is
    :func:`pod_raw_hash` of the same pod's watch line: a write read whole (a list item) and one read typed (a watch
    line) skip each other when nothing changed. Where the bytes differ (Go escapes ``<``, ``>`` and ``&`` in strings
    as ``\\u003c``…; another key order or spacing) the two hashes differ and the pod is converted again: a cost,
    never a lost update, since equal hashes mean equal bytes, equal bytes equal content (``loads(dumps(x)) == x``).
    0 (never equal) when the object is malformed (metadata or spec not an object, a hashed scalar neither a string
    nor null) or a part cannot be re-serialised; the converter then says why. A false match needs a 64-bit
    collision of Python's keyed SipHash between two writes of the same pod."""
    meta = obj.get("metadata")
    spec = obj.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return 0
    scalars = (
        meta.get("uid"),
        meta.get("creationTimestamp"),
        meta.get("deletionTimestamp"),
        spec.get("nodeName"),
        spec.get("restartPolicy"),
    )
    for v in scalars:
        if v is not None and not isinstance(v, str):
            return 0
    try:
        return _parts_hash(
            scalars,
            _dumped(meta, "labels"),
            _dumped(meta, "annotations"),
            _dumped(meta, "ownerReferences"),
            _dumped(obj, "status"),
        )
    except orjson.JSONEncodeError:
        return 0


_MISSING = object()


def _dumped(obj: dict[str, Any], key: str) -> bytes:
    """`obj[key]` as compact JSON, b"" when absent (as :class:`PodLines` keeps an absent field)."""
    v = obj.get(key, _MISSING)
    return b"" if v is _MISSING else orjson.dumps(v)


def _parts_hash(
    scalars: tuple[str | None, ...], labels: bytes, annotations: bytes, owners: bytes, status: bytes
) -> int:
    """The one hash of :func:`pod_input_hash` and :func:`pod_raw_hash` (never 0)."""
    return hash((scalars, labels, annotations, owners, status)) or 1


_ABSENT = msgspec.Raw(b"")
"""A field the line does not have (``null`` is ``Raw(b"null")``): the converter reads both as empty."""


class _LineMeta(msgspec.Struct, gc=False):
    """The metadata :class:`PodConverter` reads (:class:`~agent.sources.common.Metadata`); name, UID and
    resourceVersion required, labels, annotations and ownerReferences kept as raw JSON."""

    name: str
    uid: str
    resourceVersion: str
    namespace: str = ""
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None
    labels: msgspec.Raw = _ABSENT
    annotations: msgspec.Raw = _ABSENT
    ownerReferences: msgspec.Raw = _ABSENT


class _LineSpec(msgspec.Struct, gc=False):
    """The two spec fields the converter reads."""

    nodeName: str | None = None
    restartPolicy: str | None = None


class _LinePod(msgspec.Struct, gc=False):
    """A pod as the converter reads it: the status kept as raw JSON, the rest of the spec and metadata skipped."""

    metadata: _LineMeta
    spec: _LineSpec | None = None
    status: msgspec.Raw = _ABSENT


class _LineEvent(msgspec.Struct, gc=False):
    """A watch line, ``k8s.io/apimachinery/pkg/apis/meta/v1.WatchEvent`` with a Pod as its object."""

    type: str
    object: _LinePod


_NO_SPEC = _LineSpec()
_TYPED_EVENTS = frozenset(("ADDED", "MODIFIED"))


def pod_raw_hash(pod: _LinePod) -> int:
    """:func:`pod_input_hash` of the decoded pod line `pod`: the UID, the creation and deletion timestamps,
    spec.nodeName and restartPolicy as values; labels, annotations, ownerReferences and the whole status as the raw
    JSON bytes the apiserver sent (an absent one as b""). Equal bytes are equal content; equal content written with
    another key order or spacing hashes differently (the pod is then converted again: a cost, never a lost
    update). Never 0."""
    m = pod.metadata
    spec = pod.spec or _NO_SPEC
    return _parts_hash(
        (m.uid, m.creationTimestamp, m.deletionTimestamp, spec.nodeName, spec.restartPolicy),
        bytes(m.labels),
        bytes(m.annotations),
        bytes(m.ownerReferences),
        bytes(pod.status),
    )


class PodLines:
    """The typed decoder of pod watch lines (:class:`~agent.kube.changes.TypedLines` for
    :class:`~agent.kube.watch.Watcher`): msgspec decodes the event's type and the metadata and spec fields the
    converter reads; labels, annotations, ownerReferences and the status stay raw JSON, hashed for the same-write
    check (:func:`pod_raw_hash`) and parsed (orjson) only when the write changed what the record holds, into the
    slice of the pod the converter reads, converted by `converter` exactly as a whole object.

    Declines (the watcher then parses the line whole, and reports what it always reported): a line msgspec refuses
    (not JSON, a field of another type than the Structs', a missing name, UID or resourceVersion, nesting deeper
    than the interpreter's recursion limit), an event other than ADDED or MODIFIED, and a raw part orjson refuses.
    What msgspec skips unread is checked for JSON syntax only: a number out of the double range (``1e400``) or
    bytes that are not UTF-8 inside a skipped string, which orjson refuses for the whole line, are skipped; the
    apiserver (Go's encoding/json) writes neither.
    """

    __slots__ = ("_decode", "_hash", "_hashed", "converter")

    def __init__(self, converter: PodConverter) -> None:
        self.converter = converter
        self._decode = msgspec.json.Decoder(_LineEvent).decode
        self._hashed: _LinePod | None = None  # the pod `unchanged` last hashed to a changed write
        self._hash = 0

    def decode(self, line: bytes | memoryview) -> TypedLine | None:
        """The line's type and metadata, or None (declined: see the class). Never raises."""
        try:
            event = self._decode(line)
        except (msgspec.DecodeError, RecursionError):
            return None
        if event.type not in _TYPED_EVENTS:
            return None
        pod = event.object
        m = pod.metadata
        return TypedLine(event.type, m.namespace, m.name, m.uid, m.resourceVersion, pod)

    def unchanged(self, line: TypedLine, old: PodRecord) -> bool:
        """True when the decoded pod hashes as `old` did (:func:`pod_raw_hash`, :func:`pod_input_hash`: one hash).
        When False the hash is kept for the conversion of the same line that follows."""
        if old.input_hash == 0:
            return False
        pod: _LinePod = line.decoded
        h = pod_raw_hash(pod)
        if h == old.input_hash:
            return True
        self._hashed = pod
        self._hash = h
        return False

    def convert(self, line: TypedLine) -> PodRecord | Rejection | None:
        """The record of the decoded pod (its input_hash the :func:`pod_raw_hash`), the converter's Rejection, or
        None when orjson refuses a raw part. Never raises."""
        pod: _LinePod = line.decoded
        if pod is self._hashed:
            h = self._hash
            self._hashed = None
        else:
            h = pod_raw_hash(pod)
        m = pod.metadata
        spec = pod.spec
        try:
            meta = {
                "name": m.name,
                "namespace": m.namespace,
                "uid": m.uid,
                "resourceVersion": m.resourceVersion,
                "creationTimestamp": m.creationTimestamp,
                "deletionTimestamp": m.deletionTimestamp,
                "labels": orjson.loads(memoryview(m.labels)) if m.labels else None,
                "annotations": orjson.loads(memoryview(m.annotations)) if m.annotations else None,
                "ownerReferences": orjson.loads(memoryview(m.ownerReferences)) if m.ownerReferences else None,
            }
            obj = {
                "metadata": meta,
                "spec": None if spec is None else {"nodeName": spec.nodeName, "restartPolicy": spec.restartPolicy},
                "status": orjson.loads(memoryview(pod.status)) if pod.status else None,
            }
        except orjson.JSONDecodeError:
            return None
        return self.converter.convert_hashed(obj, h)


def _terminations(statuses: list[Any]) -> tuple[ContainerTermination, ...]:
    out: list[ContainerTermination] = []
    for cs in statuses:
        if not isinstance(cs, dict):
            raise Bad("wrong-type", "status.containerStatuses[] is not an object")
        term = get_dict(get_dict(cs, "state", "containerStatuses[]"), "terminated", "containerStatuses[].state")
        if not term:
            term = get_dict(
                get_dict(cs, "lastState", "containerStatuses[]"), "terminated", "containerStatuses[].lastState"
            )
        if not term:
            continue
        try:
            code = get_int(term, "exitCode", "containerStatuses[].state.terminated")
        except Bad:
            raise Bad("bad-exit-code", "containerStatuses[].state.terminated.exitCode is not an integer") from None
        out.append(
            ContainerTermination(
                container=intern(get_str(cs, "name", "containerStatuses[]")),
                exit_code=code if code is not None else 0,
                reason=intern(get_str(term, "reason", "terminated")),
                finished_at=parse_time(term.get("finishedAt"), "terminated.finishedAt"),
            )
        )
    return tuple(out)


def pod_signal_time(rec: PodRecord) -> datetime | None:
    """The pod's own newest timestamp that marks a fault signal: its latest container finishedAt."""
    newest: datetime | None = None
    for t in rec.terminations:
        if t.finished_at is not None and (newest is None or t.finished_at > newest):
            newest = t.finished_at
    return newest
