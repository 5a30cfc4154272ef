"""What restarts cost the job controller (testbed/controller_costs.py, used by bench/bench_e2e.py and the soak; issue
35): the controller's conflicts read from its log, the pods created then killed again per restart, and the agent's
annotation changes on job objects."""
# ruff: noqa: E501

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import controller_costs as costs
from testbed.observe import Seen

T0 = time.mktime(time.strptime("2026 1205 01:57:24", "%Y %m%d %H:%M:%S"))  # klog's local time below


@dataclass(frozen=True)
class Restart:
    job: str
    at: float
    ready_at: float | None


def job(name: str, phase: str, ours: str, at: float, kind: str = "MODIFIED") -> Seen:
    return Seen(kind, {"metadata": {"name": name}, "phase": phase, "ours": ours}, at)


def pod(uid: str, job_name: str, at: float, kind: str, deleting: bool = False) -> Seen:
    meta: dict[str, Any] = {"name": uid, "uid": uid, "job": job_name, "deleting": deleting}
    return Seen(kind, {"metadata": meta}, at)


LOG = """\
I1205 01:57:20.000000   29610 job_controller.go:100] unrelated
E1205 01:57:24.634006   29610 job_controller_actions.go:255] Failed to update status of Job bench-e2e/e2e-0: Operation cannot be fulfilled on jobs.batch.volcano.sh "e2e-0": the object has been modified; please apply your changes to the latest version and try again
I1205 01:57:24.634044   29610 job_controller.go:513] Failed to handle Job <bench-e2e/e2e-0>: Operation cannot be fulfilled on jobs.batch.volcano.sh "e2e-0": the object has been modified; please apply your changes to the latest version and try again
E1205 01:57:28.700228   29610 job_controller_actions.go:613] Failed to update status of Job bench-e2e/e2e-2: Operation cannot be fulfilled on jobs.batch.volcano.sh "e2e-2": the object has been modified; please apply your changes to the latest version and try again
"""


def test_conflicts_reads_only_the_appended_part_and_attributes_them(tmp_path: Path) -> None:
    log = tmp_path / "vc-controller-manager.log"
    old = 'E1205 01:50:00.000000 1 job_controller_actions.go:255] x on jobs.batch.volcano.sh "e2e-9": the object has been modified\n'
    log.write_text(old + LOG)
    events = [
        job("e2e-0", "Running", "[]", T0 - 10, "LISTED"),
        job("e2e-0", "Running", '[["fault-agent.io/incident", "x"]]', T0 - 0.5),  # 0.5 s before the first conflict
    ]
    got = costs.controller_conflicts(log, len(old), events, T0 - 20)
    assert got["total"] == 3  # lines, the one before the offset left out
    assert got["conflicts"] == 2  # the requeue's repetition is not a write of its own
    assert got["after_agent"] == 1  # e2e-2's came with no annotation change of ours before it
    assert got["sites"] == {
        "job_controller_actions.go:255": 1,
        "job_controller.go:513": 1,
        "job_controller_actions.go:613": 1,
    }
    assert got["resources"] == {"jobs.batch.volcano.sh": 3}
    assert costs.controller_conflicts(tmp_path / "absent.log", 0, [], 0)["total"] == 0


def test_annotation_changes_since_the_agent_started() -> None:
    events = [
        job("a", "Running", "[]", 1, "LISTED"),
        job("a", "Running", "[1]", 2),  # before the agent started: not counted, but remembered
        job("a", "Restarting", "[1]", 6),  # a status change only
        job("a", "Restarting", "[2]", 7),
        job("b", "Running", "[]", 8, "ADDED"),  # first sight is no change
    ]
    assert costs.annotation_changes(events, 5) == [("a", 7)]


def test_wasted_counts_pods_created_after_the_fault_and_deleted_before_running_again() -> None:
    item = Restart("j", at=10.0, ready_at=30.0)
    other = Restart("k", at=10.0, ready_at=30.0)
    jobs = [job("j", "Restarting", "[]", 11), job("j", "Pending", "[]", 12), job("j", "Running", "[]", 20)]
    jobs += [job("k", "Running", "[]", 5)]  # never seen leaving Running: its window ends when it was ready
    pods = [
        pod("old", "j", 1, "ADDED"),
        pod("old", "j", 11, "MODIFIED", deleting=True),  # the restart's own deletion of a pod from before
        pod("doomed", "j", 12, "ADDED"),
        pod("doomed", "j", 13, "MODIFIED", deleting=True),
        pod("doomed", "j", 13.1, "DELETED"),  # counted once
        pod("late", "j", 14, "ADDED"),
        pod("late", "j", 25, "DELETED"),  # after Running again, before ready: apart
        pod("new", "j", 15, "ADDED"),  # the replacement that stays
        pod("after", "j", 31, "ADDED"),
        pod("after", "j", 32, "DELETED"),  # after the job was ready again: another restart's
        pod("k1", "k", 12, "ADDED"),
        pod("k1", "k", 13, "DELETED"),
    ]
    got = costs.wasted_pods([item, other], pods, jobs)
    assert got == {"pods": 2, "restarts": 2, "with": 2, "max": 1, "late": 1, "unseen": 1}
