"""Each ``killJob`` of Volcano's job controller in its log, and the pods of the old version it left behind.

Usage: ``python bench/volcano_kills.py LOG [--all]`` on a vc-controller-manager log written at ``-v=3`` or more (the
testbed's with ``FAULT_AGENT_TESTBED_VOLCANO_V=3``: testbed/cluster.py). Prints how many kills there were by (the
job's phase when the ``RestartJob`` ran, pods marked out of sync, pods already terminating), then each kill that
ran in ``Pending`` and stopped fewer than the job's pods (``--replicas``, default 2, the guide's job): a ``syncJob``
just before it re-created the deleted pods under the old version (the job turned ``Pending``) and the kill, which
reads only the controller's cache (``volcano.sh/volcano`` v1.14.1 ``pkg/controllers/job/job_controller_actions.go``
``killPods``), did not see the rest yet: they survive the restart under the old ``volcano.sh/job-version``. When all
of a job's pods survive, the next restart by deletion is an outdated request Volcano only re-syncs, uncounted
(bench/RESULTS.md, "a restart by deletion Volcano did not count"; agent.core.policy.volcano_deletion_outdated).

The lines read (klog text of v1.14.1): ``Execute <Action> on Job <ns/name> in <Phase>`` (job_controller.go:385),
``Killing Job <ns/name>, current version N`` and ``Finished Job <ns/name> killing`` (job_controller_actions.go:84,
87), ``"Marked Pod as out-of-sync" Pod="ns/pod"`` (:189) and ``Pod <ns/pod> is terminating`` (:195).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_TIME = r"^[IWE]\d{4} (\S+) "
_EXECUTE = re.compile(r"Execute <(\w+)> on Job <([^>]+)> in <(\w*)>")
_KILL = re.compile(_TIME + r".*Killing Job <([^>]+)>, current version (\d+)")
_FINISHED = re.compile(r"Finished Job <([^>]+)> killing")
_MARKED = re.compile(r'"Marked Pod as out-of-sync" Pod="([^"]+)"')
_TERMINATING = re.compile(r"Pod <([^>]+)> is terminating")


@dataclass
class Kill:
    """One ``killJob``: the job (``ns/name``), the log's time of day, the job's ``status.version`` before it, the
    job's phase when its ``RestartJob`` ran, and the pods (names) it marked out of sync or found terminating."""

    job: str
    at: str
    version: int
    phase: str
    marked: list[str] = field(default_factory=list)
    terminating: list[str] = field(default_factory=list)

    def left_behind(self, replicas: int) -> int:
        """Pods of the old version this kill did not stop: in a job a sync turned ``Pending`` (it re-created the
        deleted pods), the `replicas` it did not mark or find terminating; 0 for a kill in any other phase."""
        if self.phase != "Pending":
            return 0
        return max(0, replicas - len(self.marked) - len(self.terminating))


def kills(lines: Iterable[str]) -> list[Kill]:
    """The kills in `lines` (a controller log), in the order they finished; a kill not finished in `lines` is left
    out. A pod's line counts for the kill under way of the job its name begins with (``<job>-``)."""
    phase: dict[str, str] = {}
    running: dict[str, Kill] = {}
    done: list[Kill] = []
    for line in lines:
        if m := _EXECUTE.search(line):
            phase[m.group(2)] = m.group(3)
        elif m := _KILL.search(line):
            job = m.group(2)
            running[job] = Kill(job, m.group(1), int(m.group(3)), phase.get(job, ""))
        elif (m := _FINISHED.search(line)) and m.group(1) in running:
            done.append(running.pop(m.group(1)))
        else:
            for pattern, terminating in ((_MARKED, False), (_TERMINATING, True)):
                if m := pattern.search(line):
                    namespace, _, pod = m.group(1).partition("/")
                    for job, kill in running.items():
                        if job.startswith(namespace + "/") and pod.startswith(job.split("/", 1)[1] + "-"):
                            (kill.terminating if terminating else kill.marked).append(pod)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="a vc-controller-manager log at -v=3 or more")
    parser.add_argument("--replicas", type=int, default=2, help="pods per job (default 2, the guide's job)")
    parser.add_argument("--all", action="store_true", help="print every kill, not only those that left pods")
    args = parser.parse_args()
    with args.log.open(errors="replace") as f:
        found = kills(f)
    shapes = Counter((k.phase, len(k.marked), len(k.terminating)) for k in found)
    left = [k for k in found if k.left_behind(args.replicas)]
    print(f"{len(found)} kills by (phase, marked, terminating): {dict(sorted(shapes.items()))}")
    print(
        f"kills that left pods of the old version behind: {len(left)}, "
        f"{sum(k.left_behind(args.replicas) for k in left)} pods, "
        f"{sum(1 for k in left if k.left_behind(args.replicas) >= args.replicas)} of them every pod of the job"
    )
    for k in found if args.all else left:
        print(f"{k.at} {k.job} version {k.version} in {k.phase or '?'}: marked {k.marked}, terminating {k.terminating}")


if __name__ == "__main__":
    main()
