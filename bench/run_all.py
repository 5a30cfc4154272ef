"""Run every benchmark and rewrite bench/RESULTS.md: `python bench/run_all.py [--only NAME ...] [--skip NAME ...]`.

Order: the in-process benchmarks first (no testbed), then those needing a testbed on one shared fresh testbed
(publish, end-to-end latency, recovery, initial list: the latter leaves 20,000 pods behind, so it runs last there),
then the scale benchmark on its own fresh testbed (it stops the Volcano controllers and schedulers). Each script
can also be run alone with the command in its row. A script that does not write its row itself prints it (a line
starting with ``| <row> |``); that line is put into the table here. A failing step is reported and the others
still run; the exit code is 1 if any failed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "RESULTS.md"
INTRO = """# Benchmark results

One table, rewritten by `python bench/run_all.py` (each row can also be refreshed alone with its command).
Everything runs on this project's 2-core machine, shared with other work while it ran: throughputs are
lower bounds and latencies upper bounds of what a dedicated host gives. Each row names the baseline measured
in the same run and the command that produced it.
"""


@dataclass
class Step:
    name: str
    argv: list[str]
    testbed: str = ""  # "" none, "shared" the shared testbed (placeholders {dir}, {kubeconfig}, {kafka})
    printed_rows: tuple[str, ...] = ()  # rows the script prints instead of writing them
    timeout_s: float = 900
    result: str = field(default="not run")


def steps() -> list[Step]:
    py = sys.executable
    return [
        Step("classify", [py, "bench/bench_classify.py", "--nodes", "500", "--updates", "50000"],
             printed_rows=("classify",)),
        Step("ingest", [py, "bench/bench_ingest.py", "--events", "200000", "--pods", "20000", "--write"]),
        Step("memory", [py, "bench/bench_memory.py", "--pods", "100000", "--write"]),
        Step("decision", [py, "bench/bench_decision.py", "--jobs", "400", "--rate", "2000", "--write"]),
        Step("publish", [py, "bench/bench_publish.py", "--bootstrap", "{kafka}", "--events", "200000", "--write"],
             testbed="shared"),
        Step("e2e", [py, "bench/bench_e2e.py", "--dir", "{dir}", "--jobs", "50", "--faults", "200",
                     "--interval", "0.5", "--write"], testbed="shared"),
        Step("recovery", [py, "bench/bench_recovery.py", "--dir", "{dir}", "--samples", "6", "--write"],
             testbed="shared"),
        Step("initial-list", [py, "bench/bench_initial_list.py", "--kubeconfig", "{kubeconfig}", "--pods", "20000",
                              "--write"], testbed="shared"),
        Step("scale", [py, "bench/bench_scale.py", "--write"], timeout_s=1500),
    ]  # fmt: skip


def put_row(line: str) -> None:
    """Replace the row named in `line` (``| name | ...``) in RESULTS.md, or add it at the end of the table."""
    name = line.split("|")[1].strip()
    lines = RESULTS.read_text(encoding="utf-8").splitlines()
    idx = [i for i, ln in enumerate(lines) if ln.startswith(f"| {name} |")]
    if idx:
        lines[idx[0]] = line
    else:
        lines.append(line)
    RESULTS.write_text("\n".join(lines) + "\n", encoding="utf-8")


def ensure_intro() -> None:
    """Keep the table last in the file (the scripts append rows at its end) and the intro above it."""
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    if text.startswith("# Benchmark results"):
        return
    RESULTS.write_text(INTRO + "\n" + text, encoding="utf-8")


def run_step(step: Step, env: dict[str, str], logs: Path) -> None:
    argv = [a.format(**env) for a in step.argv]
    log = logs / f"{step.name}.log"
    print(f"[{time.strftime('%H:%M:%S')}] {step.name}: {' '.join(argv)}  (log {log})", flush=True)
    started = time.monotonic()
    with log.open("w") as out:
        try:
            res = subprocess.run(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=step.timeout_s)
            code = res.returncode
        except subprocess.TimeoutExpired:
            code = -1
    took = time.monotonic() - started
    text = log.read_text(errors="replace")
    for row in step.printed_rows:
        for line in text.splitlines():
            if line.startswith(f"| {row} |"):
                put_row(line)
    step.result = f"ok in {took:.0f} s" if code == 0 else f"FAILED ({'timeout' if code == -1 else code}; log {log})"
    print(f"    {step.result}", flush=True)
    if code != 0:
        print("    " + "\n    ".join(text.splitlines()[-8:]), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="run only these steps")
    parser.add_argument("--skip", nargs="*", default=[], help="skip these steps")
    parser.add_argument("--dir", help="use this running testbed for the shared steps (default: a fresh one)")
    args = parser.parse_args()
    chosen = [s for s in steps() if (not args.only or s.name in args.only) and s.name not in args.skip]
    logs = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    ensure_intro()
    env = {"dir": "", "kubeconfig": "", "kafka": ""}
    own: Any = None  # the shared testbed when this script started it
    try:
        for step in chosen:
            if step.testbed == "shared" and not env["dir"]:
                env, own = shared_testbed(args.dir)
            if step.testbed != "shared" and own is not None:
                stop_testbed(own)  # the scale step starts its own: free the CPU first
                own = None
            run_step(step, env, logs)
    finally:
        if own is not None:
            stop_testbed(own)
    print("\nsummary:")
    for step in chosen:
        print(f"  {step.name:14} {step.result}")
    print(f"table: {RESULTS}")
    return 0 if all(s.result.startswith("ok") for s in chosen) else 1


def shared_testbed(workdir: str | None) -> tuple[dict[str, str], Any]:
    """The testbed in `workdir`, or a fresh one (returned second, for :func:`stop_testbed`; its processes
    also die with this script)."""
    from testbed.cluster import Testbed

    own = None
    if workdir:
        tb = Testbed.attach(Path(workdir))
    else:
        path = Path(tempfile.mkdtemp(prefix="bench-tb-"))
        print(f"[{time.strftime('%H:%M:%S')}] starting a shared testbed in {path}", flush=True)
        tb = own = Testbed(path, die_with_parent=True)
        tb.up()
    return {"dir": str(tb.workdir), "kubeconfig": str(tb.kubeconfig), "kafka": tb.kafka_bootstrap}, own


def stop_testbed(tb: Any) -> None:
    tb.down()
    shutil.rmtree(tb.workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
