"""The soak's schedule: a seeded random list of faults, clears and disruptions. Pure: no I/O, no clock.

A schedule is a tuple of :class:`Step`; each step starts ``at_s`` seconds after the soak's start and, unless it
is instantaneous (a failed or evicted pod), ends ``duration_s`` later (the fault is cleared, the process
resumed or restarted). A step carries its own end, so any subset of a schedule is a valid schedule (what the
shrinker relies on). The same seed and arguments give the same schedule on every machine and Python ≥ 3.11
(``random.Random`` with an integer seed is stable across versions).

Rules the generator keeps (and :func:`problems` checks):

- at most one fault of a kind on one target at a time (chip faults per chip; node, switch and NotReady per node);
- at most ``max_faulty_nodes`` nodes with a hardware fault at a time, so the jobs can still be placed;
- at most one agent down (killed or frozen) at a time, one Kafka disruption at a time, one apiserver stop at
  a time (an :data:`AGENT_GONE` step is both an agent and a Kafka disruption);
- no write to the apiserver (a fault, a clear, a pod failure) is due while the apiserver is stopped (±1 s), so
  the time a fault starts is the time it was written;
- every step ends within the soak's length.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

CHIP = "chip"
NODE = "node"
SWITCH = "switch"
NOT_READY = "not_ready"
BUSINESS = "business"
EVICT = "evict"
AGENT_KILL = "agent_kill"
AGENT_STOP = "agent_stop"
KAFKA_STOP = "kafka_stop"
KAFKA_KILL = "kafka_kill"
APISERVER_STOP = "apiserver_stop"
AGENT_GONE = "agent_gone"
"""Kafka SIGSTOP, a pod of a job failed (so the leader has events Kafka cannot take), the leader SIGKILLed with
them in its outbox and not started again in its folder: a running replica must take that outbox over (kafka.
outbox_peers_dir); a new process in a new folder replaces it when Kafka is resumed, at the step's end. Placed
apart from the seeded draw (:func:`_place_gone`) so every recorded seed keeps its other steps."""

HARDWARE = (CHIP, NODE, SWITCH, NOT_READY)
POD_STEPS = (BUSINESS, EVICT)
AGENT_STEPS = (AGENT_KILL, AGENT_STOP)
KAFKA_STEPS = (KAFKA_STOP, KAFKA_KILL)
KINDS = (*HARDWARE, *POD_STEPS, *AGENT_STEPS, *KAFKA_STEPS, APISERVER_STOP, AGENT_GONE)
APISERVER_WRITES = (*HARDWARE, *POD_STEPS, AGENT_GONE)
"""Steps whose start (and end, for faults) is a write to the apiserver."""

WEIGHTS: dict[str, int] = {
    CHIP: 4,
    NODE: 2,
    SWITCH: 2,
    NOT_READY: 2,
    BUSINESS: 2,
    EVICT: 1,
    AGENT_KILL: 2,
    AGENT_STOP: 2,
    KAFKA_STOP: 1,
    KAFKA_KILL: 1,
    APISERVER_STOP: 1,
}
DURATIONS_S: dict[str, tuple[float, float]] = {
    CHIP: (6.0, 30.0),
    NODE: (6.0, 30.0),
    SWITCH: (6.0, 30.0),
    NOT_READY: (8.0, 30.0),
    BUSINESS: (0.0, 0.0),
    EVICT: (0.0, 0.0),
    AGENT_KILL: (1.0, 8.0),  # down time before the same agent is started again
    AGENT_STOP: (1.0, 12.0),  # SIGSTOP to SIGCONT; the soak's Lease is 6 s, so about half outlive it
    KAFKA_STOP: (2.0, 12.0),
    KAFKA_KILL: (2.0, 8.0),  # down time before the broker is started again
    APISERVER_STOP: (2.0, 10.0),  # below kube-controller-manager's 40 s node-monitor grace
    AGENT_GONE: (14.0, 20.0),  # Kafka stopped; the kill comes once the leader has events pending (at most 6 s)
}
GONE_EVERY_S = 180.0
"""One :data:`AGENT_GONE` step per this many seconds of soak (at least one)."""
LEVELS: dict[str, tuple[tuple[str, int], ...]] = {
    # (level, weight): mostly levels that act, some that must not
    CHIP: (("SeparateNPU", 6), ("RestartNPU", 2), ("NotHandleFault", 1), ("SubHealthFault", 1)),
    NODE: (("SeparateFault", 3), ("NotHandleFault", 1)),
    SWITCH: (("Separate", 3), ("SubHealthFault", 1)),
    NOT_READY: (("Unknown", 1),),
}
ACTING_LEVELS = frozenset({"SeparateNPU", "RestartNPU", "SeparateFault", "Separate", "Unknown"})
"""Levels the agent restarts an opted-in (force) job for: a restart is justified while one is active."""
MOVING_LEVELS = frozenset({"SeparateNPU", "SeparateFault", "Separate", "Unknown"})
"""Levels after which no job may keep a pod on the chip or node (isolation, quarantine, a node down)."""
WARMUP_S = 3.0


class ScheduleError(ValueError):
    """A schedule could not be generated or read (bad arguments, malformed JSON). The message says which."""


@dataclass(frozen=True, slots=True)
class Step:
    """One fault or disruption.

    at_s: start, seconds after the soak's start; duration_s: until it is undone (0 for pod steps).
    node, chip: hardware targets (node index into the soak's nodes, chip index 0-7; -1 when not used).
    level: the fault level as the component writes it (chip: device plugin; node: NodeD; switch: the plugin's
        switch vocabulary; not_ready: the Ready status written).
    job, pod: pod steps' target (job index, pod index within the job); target: agent steps' "leader"/"standby".
    """

    at_s: float
    kind: str
    duration_s: float = 0.0
    node: int = -1
    chip: int = -1
    level: str = ""
    job: int = -1
    pod: int = -1
    target: str = ""

    @property
    def end_s(self) -> float:
        return self.at_s + self.duration_s

    def describe(self) -> str:
        """One line for a person, e.g. ``t+12.3s chip node 2 chip 5 SeparateNPU for 14.0s``."""
        what = {
            CHIP: f"chip fault node {self.node} chip {self.chip} {self.level}",
            NODE: f"NodeD fault node {self.node} {self.level}",
            SWITCH: f"switch fault node {self.node} {self.level}",
            NOT_READY: f"node {self.node} NotReady ({self.level})",
            BUSINESS: f"training process fails: job {self.job} pod {self.pod}",
            EVICT: f"pod evicted: job {self.job} pod {self.pod}",
            AGENT_KILL: f"SIGKILL the {self.target} agent, start it again",
            AGENT_STOP: f"SIGSTOP the {self.target} agent, then SIGCONT",
            KAFKA_STOP: "SIGSTOP Kafka, then SIGCONT",
            KAFKA_KILL: "SIGKILL Kafka, start it again",
            APISERVER_STOP: "SIGSTOP the kube-apiserver, then SIGCONT",
            AGENT_GONE: f"SIGSTOP Kafka, fail job {self.job} pod {self.pod}, SIGKILL the leader agent for good, "
            "SIGCONT Kafka",
        }.get(self.kind, self.kind)
        tail = f" for {self.duration_s:.1f}s" if self.duration_s else ""
        return f"t+{self.at_s:.1f}s {what}{tail}"


def _pick(rng: random.Random, choices: Sequence[tuple[str, int]]) -> str:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def _overlaps(a0: float, a1: float, b0: float, b1: float, margin: float = 0.0) -> bool:
    return a0 < b1 + margin and b0 < a1 + margin


def _fits(step: Step, placed: Sequence[Step], *, max_faulty_nodes: int) -> bool:
    """Whether `step` keeps the rules of the module docstring next to `placed`."""
    for other in placed:
        if not _overlaps(step.at_s, step.end_s, other.at_s, other.end_s):
            continue
        same_target = other.node == step.node and (step.kind != CHIP or other.chip == step.chip)
        if step.kind in HARDWARE and other.kind == step.kind and same_target:
            return False
        for group in ((*AGENT_STEPS, AGENT_GONE), (*KAFKA_STEPS, AGENT_GONE), (APISERVER_STOP,)):
            if step.kind in group and other.kind in group:
                return False

    def instants(w: Step) -> tuple[float, ...]:
        return (w.at_s, w.end_s) if w.kind in HARDWARE else (w.at_s,)

    if step.kind == APISERVER_STOP:
        writes = [w for w in placed if w.kind in APISERVER_WRITES]
        if any(step.at_s - 1.0 <= t <= step.end_s + 1.0 for w in writes for t in instants(w)):
            return False
    elif step.kind in APISERVER_WRITES:
        stops = [a for a in placed if a.kind == APISERVER_STOP]
        if any(a.at_s - 1.0 <= t <= a.end_s + 1.0 for a in stops for t in instants(step)):
            return False
    if step.kind in HARDWARE:
        # at every instant within the step where a fault starts, count the nodes with a fault then
        hw = [s for s in (*placed, step) if s.kind in HARDWARE and _overlaps(s.at_s, s.end_s, step.at_s, step.end_s)]
        for t in {s.at_s for s in hw if step.at_s <= s.at_s < step.end_s} | {step.at_s}:
            if len({s.node for s in hw if s.at_s <= t < s.end_s}) > max_faulty_nodes:
                return False
    return True


def generate(
    seed: int,
    duration_s: float,
    *,
    nodes: int,
    jobs: int,
    pods_per_job: int = 2,
    mean_gap_s: float = 4.0,
    max_faulty_nodes: int = 3,
    kinds: Iterable[str] = KINDS,
) -> tuple[Step, ...]:
    """A schedule for a soak of `duration_s` seconds over `nodes` nodes and `jobs` jobs of `pods_per_job` pods.

    Steps start on average every `mean_gap_s` seconds (exponential gaps) from :data:`WARMUP_S` on, of the
    `kinds` given (weights :data:`WEIGHTS`, durations :data:`DURATIONS_S`, levels :data:`LEVELS`); a draw that
    would break a rule (module docstring) is dropped. Same arguments, same schedule.

    Raises:
        ScheduleError: a duration shorter than the warm-up + 1 s, no nodes or jobs, an unknown kind, a gap ≤ 0.
    """
    chosen = tuple(kinds)
    unknown = sorted(set(chosen) - set(KINDS))
    if unknown:
        raise ScheduleError(f"unknown step kinds {unknown}; known: {', '.join(KINDS)}")
    if not chosen:
        raise ScheduleError("no step kinds to draw from")
    if not duration_s >= WARMUP_S + 1:  # also refuses NaN
        raise ScheduleError(f"duration must be at least {WARMUP_S + 1:.0f} s, got {duration_s}")
    if nodes < 1 or jobs < 1 or pods_per_job < 1 or max_faulty_nodes < 1:
        raise ScheduleError(
            f"need nodes, jobs, pods per job and max faulty nodes ≥ 1, got {nodes}, {jobs}, "
            f"{pods_per_job}, {max_faulty_nodes}"
        )
    if not mean_gap_s > 0:
        raise ScheduleError(f"mean gap must be > 0 s, got {mean_gap_s}")
    rng = random.Random(seed)
    weights = [(k, WEIGHTS[k]) for k in chosen if k != AGENT_GONE]
    placed: list[Step] = []
    t = WARMUP_S
    while weights:
        t += rng.expovariate(1.0 / mean_gap_s)
        if t >= duration_s:
            break
        kind = _pick(rng, weights)
        low, high = DURATIONS_S[kind]
        dur = round(rng.uniform(low, high), 1)
        step = Step(at_s=round(t, 1), kind=kind, duration_s=dur)
        if kind in HARDWARE:
            step = Step(
                step.at_s,
                kind,
                dur,
                node=rng.randrange(nodes),
                chip=rng.randrange(8) if kind == CHIP else -1,
                level=_pick(rng, LEVELS[kind]),
            )
        elif kind in POD_STEPS:
            step = Step(step.at_s, kind, 0.0, job=rng.randrange(jobs), pod=rng.randrange(pods_per_job))
        elif kind in AGENT_STEPS:
            step = Step(step.at_s, kind, dur, target="leader" if rng.random() < 0.7 else "standby")
        if step.end_s > duration_s:
            continue
        if _fits(step, placed, max_faulty_nodes=max_faulty_nodes):
            placed.append(step)
    if AGENT_GONE in chosen:
        placed = _place_gone(seed, duration_s, placed, jobs=jobs, pods_per_job=pods_per_job,
                             max_faulty_nodes=max_faulty_nodes)  # fmt: skip
    return tuple(sorted(placed, key=lambda s: s.at_s))


def _place_gone(
    seed: int, duration_s: float, placed: list[Step], *, jobs: int, pods_per_job: int, max_faulty_nodes: int
) -> list[Step]:
    """`placed` with one :data:`AGENT_GONE` step per :data:`GONE_EVERY_S` (at least one), each at a seeded time
    where it keeps the rules (200 tries; then the last try replaces the steps it clashes with). A random generator
    of its own (from `seed`), so the other steps are those every earlier version drew for that seed."""
    rng = random.Random(f"agent-gone-{seed}")
    out = list(placed)
    low, high = DURATIONS_S[AGENT_GONE]
    for _ in range(max(1, int(duration_s // GONE_EVERY_S))):
        step = None
        for _ in range(200):
            dur = round(rng.uniform(low, high), 1)
            if duration_s - dur <= WARMUP_S:
                return out
            at = round(rng.uniform(WARMUP_S, duration_s - dur), 1)
            step = Step(at, AGENT_GONE, dur, job=rng.randrange(jobs), pod=rng.randrange(pods_per_job), target="leader")
            if _fits(step, out, max_faulty_nodes=max_faulty_nodes):
                out.append(step)
                break
        else:  # no room: the last try's step takes the place of the agent, Kafka and apiserver steps it clashes with
            assert step is not None
            kept = [s for s in out if _fits(step, [s], max_faulty_nodes=max_faulty_nodes)]
            if _fits(step, kept, max_faulty_nodes=max_faulty_nodes):
                out = [*kept, step]
    return out


def problems(steps: Sequence[Step], *, duration_s: float, nodes: int, jobs: int, max_faulty_nodes: int) -> list[str]:
    """Every rule of the module docstring `steps` breaks, as sentences (empty: a valid schedule)."""
    out: list[str] = []
    for i, step in enumerate(steps):
        if step.kind not in KINDS:
            out.append(f"step {i}: unknown kind {step.kind!r}")
            continue
        if step.at_s < 0 or step.duration_s < 0 or step.end_s > duration_s:
            out.append(f"step {i}: {step.describe()} is outside 0-{duration_s} s")
        if step.kind in HARDWARE and not 0 <= step.node < nodes:
            out.append(f"step {i}: node {step.node} outside 0-{nodes - 1}")
        if step.kind in (*POD_STEPS, AGENT_GONE) and not 0 <= step.job < jobs:
            out.append(f"step {i}: job {step.job} outside 0-{jobs - 1}")
        if not _fits(step, [s for j, s in enumerate(steps) if j != i], max_faulty_nodes=max_faulty_nodes):
            out.append(f"step {i}: {step.describe()} breaks a rule next to the others")
    return out


def counts(steps: Iterable[Step]) -> dict[str, int]:
    """Steps by kind, every kind listed (0 included), in :data:`KINDS` order."""
    out = dict.fromkeys(KINDS, 0)
    for s in steps:
        out[s.kind] = out.get(s.kind, 0) + 1
    return out


def to_json(steps: Iterable[Step]) -> str:
    """The schedule as JSON (a list of objects with the :class:`Step` fields), one step per line."""
    return "[\n" + ",\n".join(json.dumps(asdict(s), sort_keys=True) for s in steps) + "\n]"


def from_json(text: str) -> tuple[Step, ...]:
    """Read :func:`to_json`'s output.

    Raises:
        ScheduleError: not JSON, not a list of objects, unknown fields, a missing ``at_s``/``kind``, wrong types.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScheduleError(f"schedule is not JSON: {e}") from e
    if not isinstance(data, list):
        raise ScheduleError("schedule must be a JSON list of steps")
    names = {f.name: f.type for f in fields(Step)}
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ScheduleError(f"step {i} is not an object")
        extra = sorted(set(item) - set(names))
        if extra:
            raise ScheduleError(f"step {i}: unknown fields {extra}")
        if "at_s" not in item or "kind" not in item:
            raise ScheduleError(f"step {i}: at_s and kind are required")
        if item["kind"] not in KINDS:
            raise ScheduleError(f"step {i}: unknown kind {item['kind']!r}")
        for key, value in item.items():
            want = {"float": (int, float), "int": (int,), "str": (str,)}[str(names[key])]
            if isinstance(value, bool) or not isinstance(value, want):
                raise ScheduleError(f"step {i}: {key} must be {names[key]}, got {value!r}")
        values: dict[str, Any] = {k: float(v) if names[k] == "float" else v for k, v in item.items()}
        out.append(Step(**values))
    return tuple(out)
