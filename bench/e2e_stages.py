"""Where each fault's time went in one ``bench_e2e.py`` run: its ``--dump`` joined to the agent's ``fault stages``
debug lines (agent.engine.stages; the run made with ``--agent-setting LOG__LEVEL=debug``).

Usage: ``python bench/e2e_stages.py DUMP AGENT_LOG`` (the log is the path ``bench_e2e.py`` prints as ``agent log:``,
JSON lines). Prints p50 / p90 / p99 in ms of each stage, one line each, and how many faults were joined.

Join: a stage line's ``seen_at`` (when the agent read the fault, UTC seconds, the agent's clock) is matched to the
fault of the incident's job whose PUT (``at``, the benchmark's wall clock on the same machine) came last before it,
within :data:`WITHIN_S` (one fault per job per round). Faults
the reflex watcher answered alone (before the agent started) have no stage line and are left out.

The stages (ms, per fault):

- ``bare watch``: PUT → the benchmark's own watch event of the fault (the floor of any watcher);
- ``agent read``: PUT → the agent read it (its watch, the detect pipeline);
- ``read → decided``, ``decided → durable``, ``durable → sent``, ``sent → answered``: agent.engine.stages;
- ``sent → first pod terminating``: the apiserver and the benchmark's watch of the action;
- ``action − reflex``: the first pod terminating − the reflex watcher's Command ADDED (issue 39's figure);
- ``read → fault.detected in kafka``, ``durable → fault.detected in kafka``: the broker's append time after
  the agent read the fault / after the event was durable;
- ``kafka − reflex producer``: the agent's fault.detected − the reflex producer's record (issue 39's figure);
- ``decision path CPU``: the event loop thread's CPU from taking the fault off the recovery loop's queue to handing
  its events to the sink (``path_cpu_ms``, agent.engine.stages), the figure that does not depend on the machine's
  load; ``decision path preempted``: how many times the OS took the CPU from the thread meanwhile
  (``path_preempted``), with the share of faults preempted at least once on the line below the table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

WITHIN_S = 2.0
"""Longest time from a fault's PUT to the agent reading it for the two to be joined, seconds."""


def pct(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values`, nearest rank; `values` not empty."""
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def stage_lines(log: Path) -> list[dict[str, Any]]:
    """The ``fault stages`` lines of an agent's JSON log, in ``seen_at`` order."""
    out = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if '"fault stages"' not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == "fault stages":
            out.append(rec)
    return sorted(out, key=lambda r: float(r["seen_at"]))


def join(faults: list[dict[str, Any]], stages: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each stage line with the fault of its job (the incident id is ``<job name>-<hash>``) whose PUT came last
    before its ``seen_at`` (within :data:`WITHIN_S`)."""
    by_at = sorted(faults, key=lambda f: float(f["at"]))
    pairs, used = [], set()
    for st in stages:
        seen, job = float(st["seen_at"]), str(st["incident"]).rsplit("-", 1)[0]
        best = None
        for i, f in enumerate(by_at):
            if float(f["at"]) > seen:
                break
            if i not in used and f["job"] == job and seen - float(f["at"]) <= WITHIN_S:
                best = i
        if best is not None:
            used.add(best)
            pairs.append((by_at[best], st))
    return pairs


def rows(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, list[float]]:
    """Per stage (module docstring), its values in ms over the joined faults that reached it."""
    out: dict[str, list[float]] = {}

    def add(name: str, value: float | None) -> None:
        if value is not None:
            out.setdefault(name, []).append(value)

    for f, st in pairs:
        read = (float(st["seen_at"]) - float(f["at"])) * 1000
        d, u, s, a = (st.get(f"{k}_ms") for k in ("decided", "durable", "sent", "answered"))
        add("bare watch", f.get("watch"))
        add("agent read", read)
        add("read → decided", d)
        add("decided → durable", None if d is None or u is None else u - d)
        add("durable → sent", None if u is None or s is None else s - u)
        add("sent → answered", None if s is None or a is None else a - s)
        act, ref, kafka, rk = f.get("action"), f.get("reflex"), f.get("kafka"), f.get("reflex_kafka")
        add("sent → first pod terminating", None if act is None or s is None else act - read - s)
        add("action − reflex", None if act is None or ref is None else act - ref)
        add("read → fault.detected in kafka", None if kafka is None else kafka - read)
        add("durable → fault.detected in kafka", None if kafka is None or u is None else kafka - read - u)
        add("kafka − reflex producer", None if kafka is None or rk is None else kafka - rk)
        add("decision path CPU", st.get("path_cpu_ms"))
        add("decision path preempted", st.get("path_preempted"))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    faults = [json.loads(ln) for ln in Path(argv[0]).read_text(encoding="utf-8").splitlines() if ln.strip()]
    stages = stage_lines(Path(argv[1]))
    pairs = join(faults, stages)
    print(f"{len(pairs)} faults joined ({len(stages)} stage lines, {len(faults)} faults in the dump)")
    print(f"{'stage':36} {'p50':>8} {'p90':>8} {'p99':>8} {'n':>4}")
    table = rows(pairs)
    for name, values in table.items():
        print(f"{name:36} {pct(values, 0.5):8.1f} {pct(values, 0.9):8.1f} {pct(values, 0.99):8.1f} {len(values):4d}")
    preempted = table.get("decision path preempted", [])
    if preempted:
        share = sum(1 for n in preempted if n > 0) / len(preempted)
        print(f"decision paths preempted at least once: {share:.0%} of {len(preempted)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
