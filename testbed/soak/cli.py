"""``python -m testbed.soak``: generate a seeded schedule, run it on the testbed, judge it, shrink a failure.

    python -m testbed.soak [--seed N] [--duration S] [--dir TESTBED] [--schedule FILE] [--shrink-budget S]

The seed is printed first (set it with ``--seed`` or ``FAULT_AGENT_SOAK_SEED``; the length with ``--duration``
or ``FAULT_AGENT_SOAK_DURATION``). Without ``--dir`` a fresh testbed is started in a temporary folder and
stopped at the end. A failing run prints the violations, the seed, and the shortest schedule that still
fails the same way (delta debugging over its steps, each try a fresh run on the same testbed, for at most
``--shrink-budget`` seconds), written as JSON next to a command that replays it. Exit status: 0 every
invariant held, 1 one failed, 2 the soak could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.cluster import Testbed, TestbedError
from testbed.soak import runner, schedule
from testbed.soak.checks import Verdict
from testbed.soak.schedule import ScheduleError, Step
from testbed.soak.shrink import Shrunk, ddmin

RESULTS = Path(__file__).resolve().parent.parent.parent / "bench" / "RESULTS.md"
DEFAULT_DURATION_S = 600.0
NODES = 8
JOBS = 2


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class SoakResult:
    """One soak: its seed, length, schedule, verdict, and (when it failed and shrinking ran) the shrunk one."""

    seed: int
    duration_s: float
    steps: tuple[Step, ...]
    verdict: Verdict
    shrunk: Shrunk[Step] | None = None
    shrunk_verdict: Verdict | None = None

    def report(self) -> str:
        """The run in words: seed, length, steps by kind, invariants held or the violations, the shrunk
        schedule."""
        kinds = ", ".join(f"{k} {n}" for k, n in schedule.counts(self.steps).items())
        lines = [
            f"soak seed {self.seed}, {self.duration_s:.0f} s, {len(self.steps)} steps: {kinds}",
            "figures: " + ", ".join(f"{k} {v:g}" for k, v in self.verdict.figures.items()),
            f"bounds: {runner.BOUNDS}",
        ]
        if self.verdict.ok:
            lines.append(
                "every invariant held: placement, restarts, events, lifecycle, health, controller, adoption, progress"
            )
            return "\n".join(lines)
        lines.append(f"FAILED ({', '.join(sorted(self.verdict.invariants_failed()))}), seed {self.seed}:")
        lines += [f"  [{v.invariant}] {v.detail}" for v in self.verdict.violations]
        if self.shrunk is not None:
            state = "1-minimal" if self.shrunk.complete else "shrink budget spent, may shrink further"
            lines.append(
                f"shortest failing schedule found: {len(self.shrunk.items)} of {len(self.steps)} steps "
                f"({self.shrunk.runs} re-runs, {state}):"
            )
            lines += [f"  {s.describe()}" for s in self.shrunk.items]
            if self.shrunk_verdict is not None:
                lines += [f"  fails with [{v.invariant}] {v.detail}" for v in self.shrunk_verdict.violations[:5]]
        return "\n".join(lines)


def same_failure(original: Verdict, other: Verdict) -> bool:
    """Whether `other` fails one of the invariants `original` failed (what the shrinker keeps)."""
    return bool(original.invariants_failed() & other.invariants_failed())


async def soak(
    testbed: Testbed,
    *,
    seed: int,
    duration_s: float,
    workdir: Path,
    steps: Sequence[Step] | None = None,
    shrink_budget_s: float = 0.0,
    settle_s: float = 150.0,
    nodes: int = NODES,
    jobs: int = JOBS,
    log: Callable[[str], None] = say,
) -> SoakResult:
    """Generate (or take `steps`), run and judge one soak on `testbed`; on failure shrink it for at most
    `shrink_budget_s` seconds (0: no shrinking).

    Raises:
        ScheduleError: bad duration, nodes or jobs.
        RuntimeError, TimeoutError: the run's set-up failed.
    """
    plan = tuple(steps) if steps is not None else schedule.generate(seed, duration_s, nodes=nodes, jobs=jobs)
    log(f"soak seed {seed}: {len(plan)} steps over {duration_s:.0f} s")
    verdict, _ = await runner.run(
        testbed, plan, workdir=workdir / "run-0", nodes=nodes, jobs=jobs, settle_s=settle_s, say=log
    )
    if verdict.ok or shrink_budget_s <= 0:
        return SoakResult(seed, duration_s, plan, verdict)
    log(f"soak failed ({', '.join(sorted(verdict.invariants_failed()))}); shrinking for up to {shrink_budget_s:.0f} s")
    deadline = time.monotonic() + shrink_budget_s
    tries = [0]
    last: dict[tuple[Step, ...], Verdict] = {}

    def fails(sub: tuple[Step, ...]) -> bool:
        tries[0] += 1
        log(f"shrink try {tries[0]}: {len(sub)} steps")
        try:
            v, _ = asyncio.run_coroutine_threadsafe(
                runner.run(
                    testbed,
                    sub,
                    workdir=workdir / f"run-{tries[0]}",
                    nodes=nodes,
                    jobs=jobs,
                    settle_s=settle_s,
                    say=log,
                ),
                loop,
            ).result()
        except (RuntimeError, TimeoutError) as e:  # a try that could not run proves nothing: the original stands
            log(f"shrink try {tries[0]} could not run ({e!r}); counted as not failing")
            return False
        last[sub] = v
        return same_failure(verdict, v)

    loop = asyncio.get_running_loop()
    shrunk = await asyncio.to_thread(ddmin, plan, fails, lambda: time.monotonic() < deadline)
    return SoakResult(seed, duration_s, plan, verdict, shrunk, last.get(shrunk.items))


def results_row(result: SoakResult, *, commit: str, load: str) -> str:
    """The bench/RESULTS.md row of a soak: seed, length, faults injected by kind, invariants held or failed."""
    kinds = ", ".join(f"{n} {k}" for k, n in schedule.counts(result.steps).items() if n)
    f = result.verdict.figures
    held = (
        "all 8 invariants held (placement, restarts, events, lifecycle, health, controller, adoption, progress)"
        if result.verdict.ok
        else "FAILED: " + "; ".join(f"[{v.invariant}] {v.detail}" for v in result.verdict.violations[:3])
    )
    figure = (
        f"seed {result.seed}, {result.duration_s:.0f} s, {len(result.steps)} steps ({kinds}); {held}; "
        f"{f['restarts']:.0f} restarts, {f['incidents_ended']:.0f} incidents ended "
        f"({f['incidents_timed_out']:.0f} by the {runner.RECOVERY_DEADLINE_S:.0f} s recovery deadline), "
        f"{f['events']:.0f} event ids in {f['records']:.0f} records ({f['resent_copies']:.0f} allowed re-sends), "
        f"longest acting time a pod stayed on a faulty chip or node {f['worst_placement_s']:.1f} s "
        f"(bound {runner.BOUNDS.placement_s:.0f} s), {f['agent_processes']:.0f} agent processes, "
        f"{f.get('hang_events', 0):.0f} job.hung (1 expected, the job hung on purpose) over "
        f"{f.get('progress_steps', 0):.0f} training steps; "
        f"commit {commit}, load {load}"
    )
    return (
        f"| soak {result.duration_s / 60:.0f} min | {figure} | every invariant holds | — | "
        f"`python -m testbed.soak --seed {result.seed} --duration {result.duration_s:.0f}` |"
    )


def write_row(line: str) -> None:
    """Replace the row with the same first cell in bench/RESULTS.md, or add it after the table."""
    name = line.split("|")[1].strip()
    lines = RESULTS.read_text(encoding="utf-8").splitlines()
    out, done = [], False
    for ln in lines:
        if ln.startswith(f"| {name} |"):
            if not done:
                out.append(line)
                done = True
            continue
        out.append(ln)
    if not done:
        last = max((i for i, ln in enumerate(out) if ln.startswith("|")), default=len(out) - 1)
        out.insert(last + 1, line)
    RESULTS.write_text("\n".join(out) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.soak", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seed", type=int, default=None, help="schedule seed (default: $FAULT_AGENT_SOAK_SEED, else random)"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="schedule length, seconds (default: $FAULT_AGENT_SOAK_DURATION or 600)",
    )
    parser.add_argument("--dir", default=None, help="a running testbed's folder (default: a fresh one)")
    parser.add_argument("--schedule", default=None, help="run this schedule (JSON, as a failing run writes) instead")
    parser.add_argument("--shrink-budget", type=float, default=900.0, help="seconds to spend shrinking a failure")
    parser.add_argument(
        "--settle", type=float, default=150.0, help="seconds to wait for the cluster to settle (recovery deadline + 30)"
    )
    parser.add_argument("--workdir", default=None, help="folder for agent logs and outboxes (default: temporary)")
    parser.add_argument("--write-results", action="store_true", help="add the run's row to bench/RESULTS.md")
    args = parser.parse_args(argv)
    try:
        seed = (
            args.seed
            if args.seed is not None
            else int(os.environ.get("FAULT_AGENT_SOAK_SEED") or secrets.randbelow(2**31))
        )
        duration = (
            args.duration
            if args.duration is not None
            else float(os.environ.get("FAULT_AGENT_SOAK_DURATION") or DEFAULT_DURATION_S)
        )
        steps = schedule.from_json(Path(args.schedule).read_text()) if args.schedule else None
        if steps is not None:
            duration = max([duration, *(s.end_s for s in steps)])
    except (ValueError, OSError, ScheduleError) as e:
        print(f"soak: {e}", file=sys.stderr)
        return 2
    print(f"soak seed {seed} (replay: python -m testbed.soak --seed {seed} --duration {duration:.0f})", flush=True)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="soak-"))
    say(f"agent logs and outboxes in {workdir}")
    fresh = args.dir is None
    try:
        if fresh:
            tb = Testbed(workdir / "testbed")
            say(f"starting a fresh testbed in {tb.workdir}")
            tb.up()
        else:
            tb = Testbed.attach(Path(args.dir))
    except TestbedError as e:
        print(f"soak: {e}", file=sys.stderr)
        return 2
    try:
        result = asyncio.run(
            soak(
                tb,
                seed=seed,
                duration_s=duration,
                workdir=workdir,
                steps=steps,
                shrink_budget_s=args.shrink_budget,
                settle_s=args.settle,
            )
        )
    except (RuntimeError, TimeoutError, ScheduleError) as e:
        print(f"soak: could not run: {e!r}", file=sys.stderr)
        return 2
    finally:
        if fresh:
            tb.down()
            shutil.rmtree(tb.workdir, ignore_errors=True)
    print(result.report(), flush=True)
    if result.shrunk is not None:
        path = workdir / f"shrunk-seed-{seed}.json"
        path.write_text(schedule.to_json(result.shrunk.items) + "\n")
        print(f"shrunk schedule written to {path}; replay: python -m testbed.soak --schedule {path}", flush=True)
    if args.write_results:
        write_row(results_row(result, commit=_commit(), load=_load()))
        say(f"row written to {RESULTS}")
    return 0 if result.verdict.ok else 1


def _commit() -> str:
    import subprocess

    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or "unknown"


def _load() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"
