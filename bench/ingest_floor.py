"""Where `ingest`'s time per event goes beyond parsing, in CPU time (``time.process_time``), on one core.

For the same stream as bench/bench_ingest.py: bare ``orjson.loads`` per line (the ceiling, the parsed event freed
as in the engine), then each stage of the engine's work alone, each in µs per operation, best of ``--repeat``
rounds:

- chunk: the watch's chunk handling per line (the transport's 64 KiB chunks, lines found and sliced in place);
- key: the metadata read, the cache key and the look-up, the resourceVersion check (every object event);
- hash: :func:`agent.sources.pods.pod_input_hash`, the same-write check of a write whose pod is cached;
- convert: :class:`agent.sources.pods.PodConverter` of a write that changes the record (hash included);
- apply: the :class:`agent.kube.watch.Change` and :meth:`agent.sources.state.ClusterState.apply` of it;

the same for the typed way the engine takes (:class:`agent.sources.pods.PodLines`, issue 39):

- decode: ``PodLines.decode`` of a line (msgspec: the type and what the converter reads, the rest skipped);
- raw hash: :func:`agent.sources.pods.pod_raw_hash`, the same-write check over the raw bytes of the read parts;
- typed convert: ``PodLines.convert`` (the read parts parsed into the slice of the pod the converter reads, then
  converted; hash included);

and the whole engine (:func:`bench_ingest.engine_run`, the typed way). With how many events of the stream take
each path (counted in the engine's run) it prints the floor: the sum of the stages' costs weighted by their counts,
the least this engine's correct work costs, and the ratio it allows against bare loads; once for the whole-object
way (every line parsed whole: the engine's floor before the typed way) and once for the typed way. Printed only
(the ``issue 39 ingest floor`` row of bench/RESULTS.md quotes a run).

Run: ``python bench/ingest_floor.py [--events 20000] [--pods 2000] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
from bench_ingest import engine_run, event_lines

from agent.core.cluster import PodRecord
from agent.kube.watch import Change, ChangeType
from agent.sources.pods import PodConverter, PodLines, pod_input_hash, pod_raw_hash
from agent.sources.state import ClusterState

SAMPLE = 2000
"""Events parsed ahead for the per-stage loops (the whole stream parsed at once would not fit in memory)."""


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
    data = b"".join(lines)
    chunks = [data[off : off + 65536] for off in range(0, len(data), 65536)]

    # which path each event takes in the engine: unchanged (hash only), converted (+ apply)
    paths = {"hash": 0, "convert": 0}
    counting = PodConverter()

    def count_unchanged(obj: dict[str, Any], old: PodRecord) -> bool:
        paths["hash"] += 1
        return counting.unchanged(obj, old)

    state = ClusterState()
    cache = state.store("pods")
    for line in lines:
        obj = orjson.loads(line)["object"]
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        old = cache.get(key)
        if old is not None and count_unchanged(obj, old):
            continue
        paths["convert"] += 1
        rec = counting(obj)
        assert isinstance(rec, PodRecord)
        state.apply(Change(ChangeType.MODIFIED if old else ChangeType.ADDED, "pods", key, rec, old, False, 0.0))

    sample = [orjson.loads(line) for line in lines[: min(SAMPLE, len(lines))]]
    objs = [e["object"] for e in sample]
    convert = PodConverter()
    records = [convert(o) for o in objs]
    sample_lines = lines[: len(sample)]
    typed_lines = [PodLines(PodConverter()).decode(line) for line in sample_lines]
    assert all(t is not None for t in typed_lines)

    def bare() -> None:
        for line in lines:
            orjson.loads(line)

    def chunk() -> None:
        buf = b""
        for c in chunks:
            view = memoryview(c)
            start = 0
            end = c.find(b"\n")
            if buf and end >= 0:
                buf + c[:end]
                start = end + 1
                end = c.find(b"\n", start)
            while end >= 0:
                view[start:end]
                start = end + 1
                end = c.find(b"\n", start)
            buf = c[start:]

    def key() -> None:
        for e in sample:
            obj = e.get("object")
            meta = obj.get("metadata")
            rv = meta.get("resourceVersion")
            e.get("type")
            ns = meta.get("namespace", "")
            name = meta.get("name")
            old = cache.get(f"{ns}/{name}")
            _ = rv == old.resource_version and meta.get("uid") == old.uid

    def hashed() -> None:
        for obj in objs:
            pod_input_hash(obj)

    def converted() -> None:
        conv = PodConverter()
        for obj in objs:
            conv(obj)

    def applied() -> None:
        st = ClusterState()
        for rec in records:
            st.apply(Change(ChangeType.ADDED, "pods", f"{rec.namespace}/{rec.name}", rec, None, False, 0.0))  # type: ignore[union-attr]

    def decoded() -> None:
        decode = PodLines(PodConverter()).decode
        for line in sample_lines:
            decode(line)

    def raw_hashed() -> None:
        for t in typed_lines:
            pod_raw_hash(t.decoded)  # type: ignore[union-attr]

    def typed_converted() -> None:
        typed = PodLines(PodConverter())
        for t in typed_lines:
            typed.convert(t)  # type: ignore[arg-type]

    def engine() -> float:
        return asyncio.run(engine_run(data))[0]  # its own thread CPU, the set-up and gc.collect left out

    def per_op(f: Callable[[], None], ops: int) -> float:
        best = float("inf")
        for _ in range(args.repeat):
            gc.collect()
            started = time.process_time()
            f()
            best = min(best, time.process_time() - started)
        return best / ops * 1e6

    n = len(lines)
    b = per_op(bare, n)
    c = per_op(chunk, n)
    k = per_op(key, len(sample))
    h = per_op(hashed, len(objs))
    v = per_op(converted, len(objs))
    a = per_op(applied, len(records))
    d = per_op(decoded, len(sample_lines))
    rh = per_op(raw_hashed, len(typed_lines))
    tv = per_op(typed_converted, len(typed_lines))
    e = min(engine() for _ in range(args.repeat)) / n * 1e6
    floor = b + c + k + (h * paths["hash"] + (v + a) * paths["convert"]) / n
    typed_floor = c + d + k + (rh * paths["hash"] + (tv + a) * paths["convert"]) / n
    load = os.getloadavg()[0]
    print(f"{n} events: {paths['hash']} with their pod cached (hashed), {paths['convert']} converted and applied")
    print(f"CPU µs per operation: bare orjson.loads {b:.1f}; chunk {c:.1f}; key {k:.1f}; hash {h:.1f}; "
          f"convert {v:.1f}; apply {a:.1f}")  # fmt: skip
    print(f"typed way, CPU µs per operation: decode {d:.1f}; raw hash {rh:.1f}; typed convert {tv:.1f}")
    print(f"floor (weighted sum), whole-object way {floor:.1f} µs per event ({b / floor:.2f}× of bare); typed way "
          f"{typed_floor:.1f} ({b / typed_floor:.2f}×); engine (typed) {e:.1f} ({b / e:.2f}× of bare); "
          f"load {load:.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
