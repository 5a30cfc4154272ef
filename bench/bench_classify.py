"""Benchmark `classify`: device plugin ConfigMap updates per second through parse + diff + classify.

Workload: 8-chip nodes (``huawei.com/Ascend910``), a stream of updates of which 90 % are unchanged rewrites
(the plugin's periodic rewrite: new UpdateTime and CheckCode, same DeviceList) and 10 % change the faults (a chip
fault appears or clears). Records are built before timing; only ``DeviceInfoDetector.update`` is timed, on one
core (the process is pinned to one CPU where the OS allows it).

The baseline, measured in the same run on the same stream, is the same detector with its fast paths off
(every update fully parsed, verified, classified and diffed).

Usage: python bench/bench_classify.py [--nodes 500] [--updates 50000] [--seed 1]
Prints one line per figure and a Markdown row for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from datetime import UTC, datetime

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.checkcode import check_code, go_map
from agent.core.detect.deviceinfo import DeviceInfoDetector
from agent.core.detect.levels import load_shipped_table

P = "huawei.com/Ascend910"
CODES = [("80E01801", "RestartBusiness"), ("80E3A201", "SeparateNPU"), ("80E18005", "RestartNPU")]
NOW = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)


def make_record(node: int, faulty: dict[int, tuple[str, str, int]], update_time: int) -> ConfigMapRecord:
    """One node's device ConfigMap with a valid CheckCode; `faulty` maps chip index to (code, level, fault s)."""
    chips = [f"Ascend910-{i}" for i in range(8)]
    faults = [
        {
            "fault_type": "CardUnhealthy",
            "npu_name": chips[i],
            "large_model_fault_level": lvl,
            "fault_level": lvl,
            "fault_handling": lvl,
            "fault_code": code,
            "fault_time_and_level_map": {code: {"fault_time": since * 1000, "fault_level": lvl}},
        }
        for i, (code, lvl, since) in sorted(faulty.items())
    ]
    dl = {
        P: ",".join(c for i, c in enumerate(chips) if i not in faulty),
        f"{P}-Fault": json.dumps(faults, separators=(",", ":")),
        f"{P}-NetworkUnhealthy": "",
        f"{P}-Recovering": "",
        f"{P}-Unhealthy": ",".join(chips[i] for i in sorted(faulty)),
    }
    info = {"DeviceList": go_map(dl), "UpdateTime": update_time}
    cfg = {"DeviceInfo": info, "SuperPodID": -2, "ServerIndex": -2, "CheckCode": check_code(info)}
    data = {
        "DeviceInfoCfg": json.dumps(cfg, separators=(",", ":")),
        "ManuallySeparateNPU": "",
        "UpgradeFaultReason": "{}",
    }
    return ConfigMapRecord("kube-system", f"mindx-dl-deviceinfo-node-{node:05d}", f"uid-{node}", "1", (), data)


def build_stream(nodes: int, updates: int, seed: int) -> tuple[list[ConfigMapRecord], list[ConfigMapRecord], int]:
    """(initial records, update stream, number of changed updates)."""
    rng = random.Random(seed)
    t = 1767225600
    state: list[dict[int, tuple[str, str, int]]] = [{} for _ in range(nodes)]
    for s in state:
        if rng.random() < 0.2:
            s[rng.randrange(8)] = (*rng.choice(CODES), t - 60)
    initial = [make_record(n, state[n], t) for n in range(nodes)]
    stream = []
    changed = 0
    for _ in range(updates):
        t += 1
        n = rng.randrange(nodes)
        if rng.random() < 0.10:
            chip = rng.randrange(8)
            if chip in state[n]:
                del state[n][chip]
            else:
                state[n][chip] = (*rng.choice(CODES), t - 1)
            changed += 1
        stream.append(make_record(n, state[n], t))
    return initial, stream, changed


def run(det: DeviceInfoDetector, initial: list[ConfigMapRecord], stream: list[ConfigMapRecord]) -> tuple[float, int]:
    """Updates per second over `stream` after warming the detector with `initial`; and faults+cleared seen."""
    for r in initial:
        det.update(r, NOW)
    events = 0
    start = time.perf_counter()
    for r in stream:
        res = det.update(r, NOW)
        events += len(res.faults) + len(res.cleared)
    return len(stream) / (time.perf_counter() - start), events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--updates", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    table = load_shipped_table()
    initial, stream, changed = build_stream(args.nodes, args.updates, args.seed)
    fast, ev_fast = run(DeviceInfoDetector(table), initial, stream)
    base, ev_base = run(DeviceInfoDetector(table, fast_path=False), initial, stream)
    if ev_fast != ev_base:
        raise SystemExit(f"fast path and baseline disagree: {ev_fast} vs {ev_base} fault events")
    # a relist: every ConfigMap delivered again byte-identical
    resync, _ = run(DeviceInfoDetector(table), initial, initial * max(1, args.updates // len(initial)))
    print(
        f"updates: {len(stream)} over {args.nodes} nodes, {changed} changed ({100 * changed / len(stream):.1f} %), "
        f"{ev_fast} fault events"
    )
    print(f"classify (fast path): {fast:,.0f} updates/s")
    print(f"baseline (full parse every update): {base:,.0f} updates/s")
    print(f"identical re-delivery (relist): {resync:,.0f} updates/s")
    print(
        f"| classify | {fast:,.0f} updates/s | >= 5,000 updates/s | {base:,.0f} updates/s (no fast path) | "
        f"`python bench/bench_classify.py --nodes {args.nodes} --updates {args.updates}` |"
    )


if __name__ == "__main__":
    main()
