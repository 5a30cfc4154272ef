"""Run every benchmark and rewrite bench/RESULTS.md: `python bench/run_all.py [--smoke] [--only NAME] [--skip NAME]`.

Order: the in-process benchmarks first (no testbed), then those needing a testbed on one shared fresh testbed
(publish, end-to-end latency, recovery, initial list: the latter leaves 20,000 pods behind, so it runs last there),
then the scale benchmark on its own fresh testbed (it stops the Volcano controllers and schedulers), and last the
end-to-end run with Volcano's controller as MindCluster ships it, on a fresh testbed of its own too (a shared step
after a step with a testbed of its own gets a fresh shared testbed). Each script
can also be run alone with the command in its row. A script that does not write its row itself prints it (a line
starting with ``| <row> |``); that line is put into the table here. A failing step is reported and the others
still run; the exit code is 1 if any failed.

``--smoke`` runs every script at a small size (seconds each, the testbed steps on one shared fresh testbed, the
scale step last on it too) and writes nothing: CI runs it so a benchmark that stops working fails the build.
A full run records the date, the commit and the machine's load average at the top of RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
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
    smoke: list[str] = field(default_factory=list)  # arguments after the script for --smoke (no --write)
    result: str = field(default="not run")


def steps() -> list[Step]:
    py = sys.executable
    return [
        Step("classify", [py, "bench/bench_classify.py", "--nodes", "500", "--updates", "50000"],
             printed_rows=("classify",), smoke=["--nodes", "20", "--updates", "500"]),
        Step("clusterd", [py, "bench/bench_clusterd.py", "--nodes", "4000", "--rewrites", "50", "--write"],
             smoke=["--nodes", "200", "--rewrites", "3", "--faulty", "5"]),
        Step("ingest", [py, "bench/bench_ingest.py", "--events", "200000", "--pods", "20000", "--write"],
             smoke=["--events", "2000", "--pods", "200", "--model-sample", "200"]),
        # the rows "issue 39 ingest floor" and "issue 39 ingest, typed decoding probe" (printed, written by hand)
        Step("ingest-floor", [py, "bench/ingest_floor.py"],
             smoke=["--events", "2000", "--pods", "200", "--repeat", "1"]),
        Step("ingest-typed-probe", [py, "bench/ingest_typed_probe.py"],
             smoke=["--events", "2000", "--pods", "200", "--repeat", "1"]),
        Step("record", [py, "bench/bench_record.py", "--events", "30000", "--pods", "3000", "--write"],
             smoke=["--events", "2000", "--pods", "200", "--repeat", "1"]),
        Step("memory", [py, "bench/bench_memory.py", "--pods", "100000", "--write"], smoke=["--pods", "2000"]),
        Step("decision", [py, "bench/bench_decision.py", "--jobs", "400", "--rate", "2000", "--write"],
             smoke=["--jobs", "20", "--rate", "200"]),
        Step("decision-path", [py, "bench/decision_path.py", "--jobs", "300", "--rounds", "3"],
             smoke=["--jobs", "30", "--rounds", "1"]),
        Step("bookkeeping", [py, "bench/bench_bookkeeping.py", "--restarts", "30", "--jobs", "30", "--records", "10",
                             "--write"], smoke=["--restarts", "5", "--jobs", "5", "--records", "3"]),
        Step("sim", [py, "bench/bench_sim.py", "--nodes", "10000", "100000", "--hours", "0.5", "0.05",
                     "--rate-factor", "100", "--write"],
             timeout_s=3600, smoke=["--nodes", "200", "--hours", "0.5", "--rate-factor", "250"]),
        # the row "issue 39 per-tick work" (printed, written by hand)
        Step("tick-probe", [py, "bench/tick_probe.py"], smoke=["--jobs", "500", "--ticks", "3", "--writes", "10"]),
        Step("publish", [py, "bench/bench_publish.py", "--bootstrap", "{kafka}", "--events", "200000", "--write"],
             testbed="shared", smoke=["--bootstrap", "{kafka}", "--events", "2000", "--pool", "500"]),
        # the Command rows (the agent's default is auto since issue 39: e2e-delete-pods times that path); every
        # e2e step, smoke sizes included, also times fault → job Running again and fault → first step (a training
        # loop per job) and fails when none is seen; their smoke samples the agent's idle CPU 3 s instead of 10 (what
        # waiting for the first steps adds to a smoke run, about 5-10 s at load 20, is taken back there)
        Step("e2e", [py, "bench/bench_e2e.py", "--dir", "{dir}", "--jobs", "50", "--faults", "200",
                     "--interval", "0.5", "--volcano-restart", "command", "--write"], testbed="shared",
             smoke=["--dir", "{dir}", "--jobs", "3", "--faults", "6", "--interval", "0.5", "--idle", "3",
                    "--volcano-restart", "command"]),
        # the agent and the reflex on CPU 1, the rest on the others: needs 2 CPUs
        Step("e2e-own-cpu", [py, "bench/bench_e2e.py", "--dir", "{dir}", "--jobs", "20", "--faults", "40",
                             "--interval", "3", "--agent-cpu", "1", "--volcano-restart", "command", "--write"],
             testbed="shared",
             smoke=["--dir", "{dir}", "--jobs", "3", "--faults", "6", "--interval", "0.5", "--idle", "3",
                    "--agent-cpu", "1", "--volcano-restart", "command"]),
        # --twin: a second reflex watcher, whose spread over the first is the noise of the rows over a reflex
        Step("e2e-delete-pods", [py, "bench/bench_e2e.py", "--dir", "{dir}", "--jobs", "30", "--faults", "120",
                                 "--interval", "0.2", "--volcano-restart", "delete-pods", "--twin", "--write"],
             testbed="shared",
             smoke=["--dir", "{dir}", "--jobs", "3", "--faults", "6", "--interval", "0.5", "--idle", "3",
                    "--volcano-restart", "delete-pods", "--twin"]),
        Step("recovery", [py, "bench/bench_recovery.py", "--dir", "{dir}", "--samples", "6", "--write"],
             testbed="shared", smoke=["--dir", "{dir}", "--samples", "1", "--baseline-timeout", "5"]),
        Step("restart-writes", [py, "bench/bench_restart_writes.py", "--kubeconfig", "{kubeconfig}", "--pods", "256",
                                "--repeat", "5", "--write"], testbed="shared",
             smoke=["--kubeconfig", "{kubeconfig}", "--pods", "8", "--repeat", "1"]),
        Step("hang", [py, "bench/bench_hang.py", "--dir", "{dir}", "--write"], testbed="shared", timeout_s=1200,
             smoke=["--dir", "{dir}", "--jobs", "2", "--rounds", "1", "--timeout", "5", "--lease-jobs", "50",
                    "--lease-interval", "3", "--phase", "3"]),
        Step("initial-list", [py, "bench/bench_initial_list.py", "--kubeconfig", "{kubeconfig}", "--pods", "20000",
                              "--write"], testbed="shared",
             smoke=["--kubeconfig", "{kubeconfig}", "--pods", "300", "--page", "100"]),
        Step("scale", [py, "bench/bench_scale.py", "--source", "both", "--running-wait", "120", "--write"],
             timeout_s=3600,
             # kwok's default workers in the smoke: restarting the shared testbed's kwok (a child of this process,
             # never reaped here) left it a zombie the testbed took for alive, so no pod went Running
             smoke=["--dir", "{dir}", "--nodes", "20", "--pods", "200", "--jobs", "10", "--rate", "50",
                    "--duration", "8", "--faults", "2", "--kwok-parallelism", "4"]),
        # last: a fresh testbed of its own (Volcano's controller-manager with the arguments MindCluster ships), so
        # the shared one is stopped before it and no shared step comes after
        Step("e2e-mindcluster-volcano", [py, "bench/bench_e2e.py", "--volcano-controller", "mindcluster", "--jobs",
                                         "30", "--faults", "120", "--interval", "0.2", "--write"],
             smoke=["--volcano-controller", "mindcluster", "--jobs", "3", "--faults", "6", "--interval", "0.5",
                    "--idle", "3"]),
    ]  # fmt: skip


def smoke_steps() -> list[Step]:
    """The same steps at their smoke sizes, every testbed step (scale included) on the shared testbed but the last,
    e2e-mindcluster-volcano, which starts a testbed of its own (its Volcano controller runs otherwise)."""
    out = []
    for step in steps():
        argv = step.argv[:2] + step.smoke
        out.append(Step(step.name, argv, testbed="shared" if "{dir}" in argv or step.testbed else "", timeout_s=300))
    return out


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
    """Put the intro and this run's header (date, commit, load) above the table, which stays last in the file
    (the scripts append rows at its end)."""
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    table = text[text.index("| row |") :] if "| row |" in text else ""
    RESULTS.write_text(INTRO + "\n" + run_header() + "\n" + table, encoding="utf-8")


def run_header() -> str:
    """When, on what and under which load this run was made (the load average is read at its start)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=False)
    load = os.getloadavg()
    return (
        f"This table: one run of `python bench/run_all.py` started {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC "
        f"at commit {commit or 'unknown'}{' (with uncommitted changes)' if dirty.stdout.strip() else ''}, "
        f"{os.cpu_count()} CPUs, load average at the start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
        "(1 / 5 / 15 min); each row's figure says the load it saw where the script measures it.\n"
    )


def run_step(step: Step, env: dict[str, str], logs: Path, *, smoke: bool = False) -> None:
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
    for row in step.printed_rows if not smoke else ():
        for line in text.splitlines():
            if line.startswith(f"| {row} |"):
                put_row(line)
    step.result = f"ok in {took:.0f} s" if code == 0 else f"FAILED ({'timeout' if code == -1 else code}; log {log})"
    print(f"    {step.name}: {step.result}", flush=True)
    if code != 0:
        print("    " + "\n    ".join(text.splitlines()[-8:]), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="run only these steps")
    parser.add_argument("--skip", nargs="*", default=[], help="skip these steps")
    parser.add_argument("--dir", help="use this running testbed for the shared steps (default: a fresh one)")
    parser.add_argument("--smoke", action="store_true", help="every step at a small size; RESULTS.md untouched")
    args = parser.parse_args()
    every = smoke_steps() if args.smoke else steps()
    chosen = [s for s in every if (not args.only or s.name in args.only) and s.name not in args.skip]
    logs = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    if not args.smoke:
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
                env = {"dir": "", "kubeconfig": "", "kafka": ""}  # a later shared step starts a fresh one
            run_step(step, env, logs, smoke=args.smoke)
    finally:
        if own is not None:
            stop_testbed(own)
    print("\nsummary:")
    for step in chosen:
        print(f"  {step.name:14} {step.result}")
    print(f"table: {RESULTS}" if not args.smoke else "smoke run: RESULTS.md not written")
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
