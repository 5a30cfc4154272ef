"""Benchmark: reading ClusterD's ``cluster-info-device-<i>`` chunks when one node's entry changed.

ClusterD (component/clusterd/pkg/application/resource/report.go) rewrites every device chunk of the cluster
whenever any node's device report changes, up to 5 times a second (``maxTimePerSecond``), and at least every 5 s
(``atLeastReportCycle``). A chunk holds up to ~800 KB (``SplitMapToSafeChunks`` in
component/clusterd/pkg/common/util/util.go), about 1,900 healthy 8-chip nodes; so under churn the agent reads a
chunk in which one entry changed and every other is what it read last time, several times a second, on its
event loop.

The chunks here are Go's own bytes: per-node device-plugin ConfigMaps and ClusterD's aggregate come from
testbed/mcencode (MindCluster's structs through encoding/json; the aggregate through its ClusterD stand-in),
never from a Python encoder. Measured per re-read of the changed chunk (median of `--rewrites`, one core):
- the detector with its fast path (agent.core.detect.clusterd.ClusterDDetector: entries equal to the ones last
  read, their Node unchanged, are skipped);
- baselines in the same run: the same detector reading every entry (``fast_path=False``, the code before), and
  ``orjson.loads`` of the chunk alone (the floor: any reader has to parse the JSON).
Also the first read of every chunk. Both detectors' outputs are compared on every re-read (a difference fails
the run).

    python bench/bench_clusterd.py --nodes 4000 --rewrites 50 [--write]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from e2e_common import write_row

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.chips import NodeChips
from agent.core.detect.clusterd import DEVICE_PREFIX, ClusterDDetector
from agent.core.detect.levels import load_shipped_table
from testbed.encoder import Encoder
from testbed.inject import ChipFault, device_info_cm, device_info_cms

ROW = "clusterd re-read"
T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


def _slim(cm: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": cm["metadata"]["name"], "namespace": "kube-system"},
        "data": cm["data"],
    }


def _record(cm: dict[str, Any], rv: int) -> ConfigMapRecord:
    name = cm["metadata"]["name"]
    return ConfigMapRecord("mindx-dl", name, f"uid-{name}", str(rv), (), dict(cm["data"]))


def _chunks(enc: Encoder) -> dict[str, dict[str, Any]]:
    report = enc.request("clusterd-report", namespace="mindx-dl")
    return {c["metadata"]["name"]: c for c in report if c["metadata"]["name"].startswith(DEVICE_PREFIX)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4000)
    ap.add_argument("--rewrites", type=int, default=50, help="re-reads of a chunk with one entry changed")
    ap.add_argument("--faulty", type=int, default=20, help="nodes reporting one chip fault each")
    ap.add_argument("--write", action="store_true", help="update the row in bench/RESULTS.md")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    names = [f"node-{i:05d}" for i in range(args.nodes)]
    fault = (ChipFault(3, ("80E3A201",), "SeparateNPU"),)
    enc = Encoder()
    try:
        faulty = [device_info_cm(n, fault, now=T0) for n in names[: args.faulty]]
        for cm in [*faulty, *device_info_cms(names[args.faulty :], now=T0)]:
            enc.request("clusterd-put", configmap=_slim(cm))
        chunks = _chunks(enc)
        table = load_shipped_table()
        exists = NodeChips("huawei.com/Ascend910", 8)
        known = set(names)

        def lookup(node: str) -> NodeChips | None:
            return exists if node in known else None

        fast = ClusterDDetector(table, nodes=lookup)
        slow = ClusterDDetector(table, nodes=lookup, fast_path=False)
        start = time.perf_counter()
        first = [fast.update(_record(c, 1), T0) for c in chunks.values()]
        first_s = time.perf_counter() - start
        for c in chunks.values():
            slow.update(_record(c, 1), T0)
        raised = sum(len(r.faults) for r in first)
        if raised != args.faulty:
            raise SystemExit(f"first read raised {raised} faults, expected {args.faulty}")

        t_fast: list[float] = []
        t_slow: list[float] = []
        t_parse: list[float] = []
        sizes: list[int] = []
        for k in range(args.rewrites):
            at = T0 + timedelta(seconds=10 * (k + 1))
            node = names[(k * 7919) % args.nodes]  # a node's periodic report: a new UpdateTime, no new fault
            index = names.index(node)
            cm = device_info_cm(node, fault if index < args.faulty else (), now=at)
            enc.request("clusterd-put", configmap=_slim(cm))
            now_chunks = _chunks(enc)
            changed = [c for name, c in now_chunks.items() if chunks.get(name, {}).get("data") != c["data"]]
            chunks = now_chunks
            if len(changed) != 1:
                raise SystemExit(f"rewrite {k}: {len(changed)} chunks changed, expected 1")
            text = next(iter(changed[0]["data"].values()))
            sizes.append(len(text))
            rec = _record(changed[0], 2 + k)
            t = time.perf_counter()
            orjson.loads(text)
            t_parse.append(time.perf_counter() - t)
            t = time.perf_counter()
            got = fast.update(rec, at)
            t_fast.append(time.perf_counter() - t)
            t = time.perf_counter()
            want = slow.update(rec, at)
            t_slow.append(time.perf_counter() - t)
            if (got.faults, got.cleared, got.rejections) != (want.faults, want.cleared, want.rejections):
                raise SystemExit(f"rewrite {k}: the fast path and the full read disagree: {got} vs {want}")
    finally:
        enc.close()

    def ms(xs: list[float]) -> float:
        return statistics.median(xs) * 1000

    kb = statistics.median(sizes) / 1024
    fast_ms, slow_ms, parse_ms = ms(t_fast), ms(t_slow), ms(t_parse)
    print(f"cluster: {args.nodes} nodes ({args.faulty} with a chip fault), {len(chunks)} device chunks")
    print(f"first read of every chunk: {first_s * 1000:.1f} ms")
    print(f"re-read of the changed chunk ({kb:.0f} KB, median of {args.rewrites}): fast path {fast_ms:.2f} ms")
    print(f"baseline: every entry read {slow_ms:.2f} ms; orjson.loads alone {parse_ms:.2f} ms")
    if args.write:
        write_row(
            ROW,
            f"{fast_ms:.2f} ms per re-read of an {kb:.0f} KB chunk in which one entry changed (median of "
            f"{args.rewrites}; {args.nodes} nodes in {len(chunks)} Go-encoded chunks; "
            f"first read of every chunk {first_s * 1000:.0f} ms; one core; {datetime.now(UTC):%Y-%m-%d})",
            "close to the JSON parse: ClusterD rewrites every chunk on each change, up to 5 times a second",
            f"every entry read (fast_path=False, the code before): {slow_ms:.2f} ms; orjson.loads alone "
            f"{parse_ms:.2f} ms",
            f"python bench/bench_clusterd.py --nodes {args.nodes} --rewrites {args.rewrites} --write",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
