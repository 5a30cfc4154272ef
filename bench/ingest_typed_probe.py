"""A probe, not a benchmark of the agent: what an event costs when only the fields the pod converter reads are
decoded, against bare ``orjson.loads`` of the same lines, in thread CPU time on one core.

The engine parses each whole 5 KB pod event into dicts (``orjson.loads``, the ceiling of bench/bench_ingest.py)
and then reads a few fields. A typed decoder (msgspec Structs: metadata's name, namespace, uid, resourceVersion and
timestamps, spec.nodeName and restartPolicy as values; labels, annotations, ownerReferences and the whole status
as raw JSON, ``msgspec.Raw``) skips the rest in C, and the same-write check can hash the raw JSON of the read parts
instead of re-serialising them (:func:`agent.sources.pods.pod_input_hash`). This measures that path for the stream
of bench/bench_ingest.py: decode alone, and decode plus the hash of the raw parts.

msgspec is a runtime dependency of the agent since agent/sources/pods.py PodLines took this path:
``python bench/ingest_typed_probe.py [--events 20000] [--pods 2000]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable

import msgspec
import orjson
from bench_ingest import event_lines


class Meta(msgspec.Struct):  # type: ignore[misc]
    """The metadata fields the pod converter reads."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None
    labels: msgspec.Raw = msgspec.Raw(b"")
    annotations: msgspec.Raw = msgspec.Raw(b"")
    ownerReferences: msgspec.Raw = msgspec.Raw(b"")


class Spec(msgspec.Struct):  # type: ignore[misc]
    """The spec fields the pod converter reads."""

    nodeName: str = ""
    restartPolicy: str = ""


class Pod(msgspec.Struct):  # type: ignore[misc]
    """A pod as the converter reads it: the status kept raw."""

    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: Spec = msgspec.field(default_factory=Spec)
    status: msgspec.Raw = msgspec.Raw(b"")


class Event(msgspec.Struct):  # type: ignore[misc]
    """A watch event line."""

    type: str
    object: Pod


def main() -> int:
    """Measure and print."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--pods", type=int, default=2_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    lines = list(event_lines(args.events, args.pods))
    decode = msgspec.json.Decoder(Event).decode

    def bare() -> None:
        for line in lines:
            orjson.loads(line)

    def typed() -> None:
        for line in lines:
            decode(line)

    def typed_hash() -> None:
        for line in lines:
            pod = decode(line).object
            m = pod.metadata
            hash((bytes(m.labels), bytes(m.annotations), bytes(m.ownerReferences), bytes(pod.status), m.uid,
                  m.creationTimestamp, m.deletionTimestamp, pod.spec.nodeName, pod.spec.restartPolicy))  # fmt: skip

    def per_event(f: Callable[[], None]) -> float:
        best = float("inf")
        for _ in range(args.repeat):
            gc.collect()
            started = time.thread_time()
            f()
            best = min(best, time.thread_time() - started)
        return best / len(lines) * 1e6

    b, t, h = per_event(bare), per_event(typed), per_event(typed_hash)
    print(f"{len(lines)} events, thread CPU µs per event: bare orjson.loads {b:.1f}; typed decode {t:.1f}; "
          f"typed decode + hash of the raw read parts {h:.1f} ({b / h:.2f}× the events per CPU-s of bare); "
          f"msgspec {msgspec.__version__}, orjson {orjson.__version__}; load {os.getloadavg()[0]:.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
