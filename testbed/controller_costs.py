"""What restarts cost the job controllers, read from outside (issue 35): their status-update conflicts, counted from
their logs, and the pods they created then killed again per restart, from watches of the jobs and pods. Shared by
``bench/bench_e2e.py`` and the soak (:mod:`testbed.soak.runner`).

- **Conflicts**: Volcano's controller-manager logs each failed read-modify-write of a job or PodGroup status as
  klog lines with "the object has been modified" (the apiserver's 409 message); a write of ours on the same object
  between its read and its write is one cause. :func:`controller_conflicts` counts them in what the log got after a
  byte offset and attributes one to the agent when the job watch saw the agent's ``fault-agent.io/…`` annotations
  on that job change at most :data:`AFTER_AGENT_S` before it (the agent writes nothing on jobs since its records
  moved to ConfigMaps, so :func:`annotation_changes` is the agent's writes on job objects).
- **Pods created then killed again**: :func:`wasted_pods`, per restart, the pods of its job ADDED after it whose
  first deletion came before the job was Running again (:func:`running_again`).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from testbed.observe import Seen

CONFLICT_TEXT = "the object has been modified"
AGENT_KEYS = "fault-agent.io/"  # every annotation the agent wrote on job objects before its records moved to ConfigMaps


class Restart(Protocol):
    """One restart to judge: its job's name, when the fault (or the restart) was sent (wall clock s), and when the
    run saw the job ready again (None: unknown, its window ends at the job's Running again)."""

    @property
    def job(self) -> str: ...
    @property
    def at(self) -> float: ...
    @property
    def ready_at(self) -> float | None: ...


def slim_job(obj: dict[str, Any]) -> dict[str, Any]:
    """A Volcano Job's name, phase and the annotations the agent once wrote on it (``fault-agent.io/…``)."""
    meta = obj.get("metadata", {})
    ours = sorted((k, v) for k, v in (meta.get("annotations") or {}).items() if k.startswith(AGENT_KEYS))
    phase = ((obj.get("status") or {}).get("state") or {}).get("phase", "")
    return {"metadata": {"name": meta.get("name", "")}, "phase": phase, "ours": json.dumps(ours)}


def slim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """A Volcano Job pod's name, UID, job name and whether it is being deleted."""
    meta = obj.get("metadata", {})
    return {
        "metadata": {
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
            "job": (meta.get("labels") or {}).get("volcano.sh/job-name", ""),
            "deleting": bool(meta.get("deletionTimestamp")),
        }
    }


_SITE = re.compile(r"\s(\S+\.go:\d+)\]")
_ON = re.compile(r'Operation cannot be fulfilled on (\S+) "([^"]+)"')
_KLOG_TIME = re.compile(r"^[IWEF](\d{4} \d\d:\d\d:\d\d\.\d+)")
REQUEUED = "job_controller.go:513"  # Volcano v1.14.1 handleJobError: repeats a failed action's error at its requeue
AFTER_AGENT_S = 2.0  # a conflict this soon after the agent changed its annotations on that job is counted as its


def controller_conflicts(log: Path, offset: int, job_events: list[Seen], since: float) -> dict[str, Any]:
    """Volcano's controller's status-update conflicts in what its log got after byte `offset`: lines saying
    "the object has been modified", in all and by the source line that logged them (``file.go:N``) and by the
    resource named ("jobs.batch.volcano.sh", "podgroups.scheduling.volcano.sh", …). ``conflicts``: the lines
    but the requeue's repetition (:data:`REQUEUED`), one per failed write; ``after_agent``: those on a job whose
    ``fault-agent.io/…`` annotations the job watch saw change at most :data:`AFTER_AGENT_S` before (klog's local
    time), the agent's write being the likely change in the way."""
    empty = {"total": 0, "conflicts": 0, "after_agent": 0, "sites": {}, "resources": {}, "log": str(log)}
    if not log.exists():
        return empty
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    lines = [ln for ln in text.splitlines() if CONFLICT_TEXT in ln]
    writes = annotation_changes(job_events, since)
    sites: Counter[str] = Counter()
    resources: Counter[str] = Counter()
    conflicts = after_agent = 0
    # klog writes no year: take the run's own (the agent's start, `since`), never the wall clock's
    year = time.localtime(since).tm_year
    for ln in lines:
        at = _SITE.search(ln)
        site = at.group(1) if at else "?"
        sites[site] += 1
        on = _ON.search(ln)
        resources[on.group(1) if on else "?"] += 1
        if site == REQUEUED:
            continue
        conflicts += 1
        stamp = _KLOG_TIME.match(ln)
        if on is None or stamp is None:
            continue
        t = time.mktime(time.strptime(f"{year}{stamp.group(1).split('.')[0]}", "%Y%m%d %H:%M:%S"))
        if t < since - 180 * 86400:  # a run across New Year: the line is of the next year
            t = time.mktime(time.strptime(f"{year + 1}{stamp.group(1).split('.')[0]}", "%Y%m%d %H:%M:%S"))
        t += float("0." + stamp.group(1).split(".")[1])
        if any(job == on.group(2) and t - AFTER_AGENT_S <= w <= t for job, w in writes):
            after_agent += 1
    return {**empty, "total": len(lines), "conflicts": conflicts, "after_agent": after_agent,
            "sites": dict(sites.most_common()), "resources": dict(resources.most_common())}  # fmt: skip


def running_again(job_events: list[Seen], job: str, since: float) -> float | None:
    """When `job`'s watch first showed it Running after a phase other than Running, both at or after `since`
    (a restart takes it through Restarting and Pending): None if not seen."""
    left = False
    for s in job_events:
        if s.at < since or s.name != job:
            continue
        if s.obj["phase"] != "Running":
            left = True
        elif left:
            return s.at
    return None


def wasted_pods(items: Sequence[Restart], pod_events: list[Seen], job_events: list[Seen]) -> dict[str, Any]:
    """Pods created then killed again per restart: for each fault, the pods of its job ADDED on this process's
    pod watch after the fault's PUT whose first deletion (deletionTimestamp or DELETED) came before the job was
    Running again on the job watch (:func:`running_again`; this benchmark's next 'all jobs ready' when the watch
    never showed it). ``late``: such pods deleted after that but before the job was seen ready again (with
    Running replacement pods), counted apart."""
    added: dict[str, tuple[str, float]] = {}  # pod uid -> (job, ADDED at)
    deleted: dict[str, float] = {}  # pod uid -> first deletion seen
    for s in pod_events:
        meta = s.obj["metadata"]
        if s.type == "ADDED":
            added.setdefault(meta["uid"], (meta["job"], s.at))
        elif meta["uid"] not in deleted and (s.type == "DELETED" or (s.type == "MODIFIED" and meta["deleting"])):
            deleted[meta["uid"]] = s.at
    per: list[int] = []
    late = 0
    unseen = 0
    for item in items:
        end = item.ready_at if item.ready_at is not None else math.inf
        running = running_again(job_events, item.job, item.at)
        if running is None:
            unseen += 1
        again = min(running, end) if running is not None else end
        n = 0
        for uid, (job, at) in added.items():
            gone = deleted.get(uid)
            if job != item.job or at < item.at or gone is None or gone >= end:
                continue
            if gone < again:
                n += 1
            else:
                late += 1
        per.append(n)
    return {"pods": sum(per), "restarts": len(per), "with": sum(1 for n in per if n), "max": max(per, default=0),
            "late": late, "unseen": unseen}  # fmt: skip


def annotation_changes(job_events: list[Seen], since: float) -> list[tuple[str, float]]:
    """(job, seen at) of each change of the ``fault-agent.io/…`` annotations on the benchmark's jobs seen after
    `since` (the agent's start): its writes on job objects (the code before the job records moved to ConfigMaps
    kept them there)."""
    last: dict[str, str] = {}
    out: list[tuple[str, float]] = []
    for s in job_events:
        prev = last.get(s.name)
        if s.at >= since and prev is not None and s.obj["ours"] != prev:
            out.append((s.name, s.at))
        last[s.name] = s.obj["ours"]
    return out
