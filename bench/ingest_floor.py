"""Where `ingest`'s time per event goes beyond parsing, in CPU time (``time.process_time``), on one core.

For the same stream as bench/bench_ingest.py: bare ``orjson.loads`` per line (the ceiling), the watch's chunk
split alone, ``orjson.loads`` plus :func:`agent.sources.pods.pod_input_hash` (what a write that changes nothing the
record holds costs), and the whole engine (:func:`bench_ingest.engine_run`); each in µs per event, best of
``--repeat`` rounds. Printed only (the ``issue 39 ingest floor`` row of bench/RESULTS.md quotes a run).

Run: ``python bench/ingest_floor.py [--events 20000] [--pods 2000] [--repeat 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
from collections.abc import Callable

import orjson
from bench_ingest import engine_run, event_lines

from agent.sources.pods import pod_input_hash


def main() -> int:
    """Measure and print."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--pods", type=int, default=2_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    lines = list(event_lines(args.events, args.pods))
    data = b"".join(lines)

    def bare() -> None:
        for line in lines:
            orjson.loads(line)

    def split() -> None:
        buf = b""
        view = memoryview(data)
        for off in range(0, len(data), 65536):
            parts = bytes(view[off : off + 65536]).split(b"\n")
            if buf:
                parts[0] = buf + parts[0]
            buf = parts.pop()

    def hashed() -> None:
        for line in lines:
            pod_input_hash(orjson.loads(line)["object"])

    def engine() -> None:
        asyncio.run(engine_run(data))

    def per_event(f: Callable[[], None]) -> float:
        best = float("inf")
        for _ in range(args.repeat):
            gc.collect()
            started = time.process_time()
            f()
            best = min(best, time.process_time() - started)
        return best / len(lines) * 1e6

    b, s, h, e = per_event(bare), per_event(split), per_event(hashed), per_event(engine)
    load = os.getloadavg()[0]
    print(f"{len(lines)} events, CPU µs per event: bare orjson.loads {b:.1f}; chunk split {s:.1f}; "
          f"loads + pod_input_hash {h:.1f}; engine {e:.1f} ({b / e:.2f}× of bare); load {load:.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
