"""What the watch engine watches and what it hands on: the watched collection (:class:`Resource`), the transport it
reads through (:class:`Transport`, one :class:`ListPage` per list request), and the :class:`Change` records it
computes (from a watch event, or by :func:`diff_relist` from a complete list against the cache).

The wire format is the Kubernetes API's: ``{"type": ..., "object": ...}`` per watch line
(``k8s.io/apimachinery/pkg/apis/meta/v1.WatchEvent``) and a ``List`` with ``metadata.continue``. A record is any
object with the ``resource_version`` and ``uid`` of the write it was converted from (:class:`HasVersion`).
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from agent.core.faults import Rejection


class HasVersion(Protocol):
    """What the engine needs from a record: its resourceVersion and UID (to see delete + re-create)."""

    @property
    def resource_version(self) -> str: ...

    @property
    def uid(self) -> str: ...


R = TypeVar("R", bound=HasVersion)


@dataclass(frozen=True, slots=True)
class Resource:
    """A watched collection.

    Attributes:
        source: the state store and metric label this collection feeds (``pods``, ``nodes``,
            ``deviceinfo``, ``nodeinfo``, ``faultconfig``, ``clusterinfo``, ``vcjobs``, ``acjobs``).
        kind: the object kind, for rejections and logs (``Pod``, ``ConfigMap``, ``Job``).
        group: API group, "" for the core group.
        version: API version, e.g. ``v1``, ``v1alpha1``.
        plural: resource name in the URL, e.g. ``pods``, ``jobs``.
        namespace: watch one namespace; None watches all (or a cluster-scoped kind).
        label_selector: passed as ``labelSelector``; "" selects all.
        field_selector: passed as ``fieldSelector``; "" selects all.
        name_prefix: keep only objects whose name starts with this ("" keeps all); filtered client-side
            because field selectors cannot match prefixes.
    """

    source: str
    kind: str
    group: str
    version: str
    plural: str
    namespace: str | None = None
    label_selector: str = ""
    field_selector: str = ""
    name_prefix: str = ""

    @property
    def path(self) -> str:
        """The collection URL path, e.g. ``/api/v1/namespaces/kube-system/configmaps``."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespace:
            return f"{base}/namespaces/{self.namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    @property
    def watcher_id(self) -> str:
        """Unique name of one watcher of this source: ``pods@ns1``, ``nodes@*``."""
        return f"{self.source}@{self.namespace or '*'}"


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a list: the raw items, the list's resourceVersion and the ``continue`` token ("" = last)."""

    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str


class Transport(Protocol):
    """How the engine talks to the apiserver. :class:`agent.kube.client.ApiTransport` is the real one.

    Both methods raise :class:`~agent.kube.errors.KubeError` subclasses only (ResourceGone on 410).
    """

    async def list_page(self, resource: Resource, *, limit: int, continue_token: str) -> ListPage:
        """One page of ``GET <resource.path>?limit=&continue=`` (resourceVersion unset: a consistent read)."""
        ...

    def watch(
        self, resource: Resource, *, resource_version: str, timeout_s: int
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Open ``GET <path>?watch=1&resourceVersion=&allowWatchBookmarks=true&timeoutSeconds=``.

        Yields an iterator of raw body chunks (arbitrary boundaries; the engine splits lines).
        """
        ...


class TypedLine(NamedTuple):
    """What a typed decoder (:class:`TypedLines`) read of one watch line: the event's type (``ADDED`` or
    ``MODIFIED``), the object's metadata the engine needs (namespace, "" for a cluster-scoped object; name, UID and
    resourceVersion, each a string as the Kubernetes API writes it) and the decoder's own result (`decoded`), handed
    back to its ``unchanged`` and ``convert``."""

    type: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    decoded: Any


class TypedLines(Protocol[R]):
    """A decoder of one resource's watch lines that reads only what its converter needs (e.g. msgspec Structs with
    the unread parts kept as raw JSON), so a write that changed nothing the record holds costs a fraction of parsing
    the whole line. The engine (:meth:`agent.kube.watch.Watcher.on_line`) tries it first; whatever it declines
    (``None`` from ``decode`` or ``convert``) goes the whole-object way, which reports every error as before.
    """

    def decode(self, line: bytes | memoryview) -> TypedLine | None:
        """The line's type and metadata, or None: not an ADDED or MODIFIED event this decoder reads (a BOOKMARK, an
        ERROR, a DELETED event, malformed JSON, a field of another type than the decoder's). Never raises."""
        ...

    def unchanged(self, line: TypedLine, old: R) -> bool:
        """True when the decoded object converts to the cached record `old` (apart from its resourceVersion)."""
        ...

    def convert(self, line: TypedLine) -> R | Rejection | None:
        """The record, the converter's Rejection, or None when the parts the converter reads cannot be decoded
        further (the engine then takes the whole-object way). Never raises."""
        ...


class ChangeType(enum.StrEnum):
    """What happened to a cached object. LISTED marks the end of a (re-)list: the cache is complete. RESUMED marks
    the apiserver answering again after the watcher lost it (connection errors, a silent stream): sent before the
    changes the agent missed meanwhile, so a consumer knows that timestamps written during the gap were written
    while the agent was blind (see agent.core.detect.nodes)."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    LISTED = "LISTED"
    RESUMED = "RESUMED"


@dataclass(frozen=True, slots=True)
class Change(Generic[R]):
    """One change to the cache of `source`.

    Attributes:
        new: the record after the change (None for DELETED and LISTED).
        old: the record before (None for ADDED and LISTED).
        relist: True when the change was found by a (re-)list diff rather than a watch event.
        seen_at: Unix time (s) when the agent read it.
        watcher_id: for LISTED and RESUMED, which watcher finished its list / got its apiserver back.
    """

    type: ChangeType
    source: str
    key: str
    new: R | None
    old: R | None
    relist: bool
    seen_at: float
    watcher_id: str = ""


def diff_relist(
    cache: Mapping[str, R],
    listed: Mapping[str, R | None],
    scope: Callable[[str], bool],
) -> list[tuple[ChangeType, str, R | None, R | None]]:
    """Changes that turn `cache` into the listed state. Pure.

    Args:
        cache: key → record before the list.
        listed: key → record of every object in the complete list; None for an object that was listed but
            rejected (it exists, so it is not deleted, and its last good record is kept).
        scope: which cache keys this list covers (a namespaced watcher must not delete other namespaces).

    Returns:
        ``(type, key, new, old)`` tuples: additions and modifications in list order, then deletions.
        An object whose UID changed (deleted and re-created while we were away) yields DELETED then ADDED.
        An object whose resourceVersion did not change yields nothing.
    """
    out: list[tuple[ChangeType, str, R | None, R | None]] = []
    for key, new in listed.items():
        if new is None:
            continue
        old = cache.get(key)
        if old is None:
            out.append((ChangeType.ADDED, key, new, None))
        elif old.uid != new.uid:
            out.append((ChangeType.DELETED, key, None, old))
            out.append((ChangeType.ADDED, key, new, None))
        elif old.resource_version != new.resource_version:
            out.append((ChangeType.MODIFIED, key, new, old))
    for key, old in cache.items():
        if key not in listed and scope(key):
            out.append((ChangeType.DELETED, key, None, old))
    return out


def same_write(obj: Mapping[str, Any], rec: HasVersion) -> bool:
    """True when `obj` carries the UID and resourceVersion `rec` was converted from: the same write of the same
    object (a resourceVersion names one write), so it converts to `rec`."""
    meta = obj.get("metadata")
    return isinstance(meta, dict) and meta.get("resourceVersion") == rec.resource_version and meta.get("uid") == rec.uid
