"""Benchmark `memory per pod`: RSS growth per cached pod at 100k pods.

Realistic pod objects (bench_ingest.make_pod: Volcano jobs of 16 pods, two pods per node, 20 namespaces) are turned
into PodRecords and applied to a ClusterState (store + pods-by-node + pods-by-job). Each raw object is built,
converted and dropped one at a time, so the growth measured is the cache alone. ``--way typed`` (the default) converts
each pod as the watch does, from its watch line through :class:`agent.sources.pods.PodLines` (issue 39); ``--way
whole`` as a list item, the parsed object through :class:`agent.sources.pods.PodConverter`. RSS is read from
/proc/self/statm before and after (after a full GC). The watcher's per-object overhead is in the state: the
engine keeps no copy of its own.

Run: ``python bench/bench_memory.py [--pods 100000] [--write]``
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

from bench_ingest import make_pod, update_row

from agent.core.cluster import PodRecord
from agent.kube.watch import Change, ChangeType
from agent.sources.pods import PodConverter, PodLines
from agent.sources.state import ClusterState


def rss_bytes() -> int:
    """Resident set size of this process, from /proc/self/statm (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> int:
    """Fill a ClusterState with --pods pods and print RSS growth per pod; --write updates bench/RESULTS.md."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=100_000)
    ap.add_argument("--way", choices=("typed", "whole"), default="typed", help="the watch's way, or a list item's")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    converter = PodConverter()
    typed = PodLines(converter)
    dumps = __import__("orjson").dumps

    def convert(obj: dict[str, object]) -> object:
        if args.way == "whole":
            return converter(obj)
        decoded = typed.decode(dumps({"type": "ADDED", "object": obj}))
        assert decoded is not None
        return typed.convert(decoded)

    # Warm up: allocate the converter's caches' first entries and the interpreter's small-object pools.
    for i in range(100):
        convert(make_pod(10**7 + i, rv=1))
    state = ClusterState()
    gc.collect()
    before = rss_bytes()
    started = time.perf_counter()
    for i in range(args.pods):
        rec = convert(make_pod(i, rv=1000 + i, namespace=f"team-{(i // 16) % 20}"))
        assert isinstance(rec, PodRecord)
        key = f"{rec.namespace}/{rec.name}"
        state.apply(Change(ChangeType.ADDED, "pods", key, rec, None, False, 0.0))
    gc.collect()
    after = rss_bytes()
    per_pod = (after - before) / args.pods
    assert len(state.pods) == args.pods
    assert state.check_indexes() == []
    print(f"{args.pods} pods cached in {time.perf_counter() - started:.1f} s; RSS +{(after - before) / 2**20:.1f} MiB"
          f" = {per_pod:,.0f} bytes/pod ({args.way} way); {len(state.pods_by_node)} nodes, "
          f"{len(state.pods_by_job)} jobs")  # fmt: skip
    raw = len(__import__("orjson").dumps(make_pod(1, rv=1)))
    print(f"for scale: one raw pod object is {raw} bytes of JSON")
    if args.write:
        update_row(
            "memory per pod",
            f"{per_pod:,.0f} B/pod RSS growth at {args.pods:,} pods ({args.way} way)",
            "≤ 1 KB/pod (issue 39)",
            f"raw JSON of the same pod {raw:,} B; full Go objects ~35 KB, stripped Go informers ~4 KB (issue)",
            f"python bench/bench_memory.py --pods {args.pods} --way {args.way} --write",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
