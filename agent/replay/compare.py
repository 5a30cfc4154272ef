"""What-if: the same input under two configurations, and the decisions that differ.

The other configuration (``fault-agent replay FILE --compare OTHER.yaml``) is one of:

- an agent settings file (``agent.yaml`` form, agent.settings): replayed as it is;
- a fault-level table: a YAML mapping with faultCode.json's lists (``NotHandleFaultCodes``,
  ``RestartRequestCodes``, … ``SeparateNPUNetworkCodes``; the form of config/fault_levels.yaml) and/or the
  frequency and duration rules of faultCustomization.json (``FaultFrequency``, ``FaultDuration``,
  ``GraceTolerance``), or the ``mindx-dl-fault-config`` ConfigMap's ``data`` keys themselves (``faultCode.json``,
  ``faultCustomization.json``, ``SwitchFaultCode.json``, each a JSON text). It is replayed under the first
  configuration as that ConfigMap (the device plugin's override, component/ascend-device-plugin/pkg/server/
  manager.go ``loadFaultCode``), present from the start; the recording's own copy of that ConfigMap is left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from agent.core.cluster import JobRecord
from agent.core.detect.customization import CUSTOMIZATION_KEY
from agent.core.detect.levels import (
    FAULT_CONFIG_KEY,
    FAULT_CONFIG_NAME,
    LIST_LEVELS,
    NETWORK_LIST_LEVELS,
    SWITCH_CONFIG_KEY,
)
from agent.core.detect.nesting import yaml_load
from agent.core.faults import Fault
from agent.core.policy import Action, Decision
from agent.replay.ports import DECISION, EVENT, WRITE, Output, rfc3339_ms
from agent.replay.records import Record
from agent.settings import Settings, load_settings

CUSTOMIZATION_FIELDS = ("FaultFrequency", "FaultDuration", "GraceTolerance")
"""faultCustomization.json's top-level keys (component/ascend-device-plugin/pkg/common/fault_code.go)."""


class CompareError(ValueError):
    """The other configuration cannot be read (the message names the file)."""


def other_configuration(path: Path, base: Settings) -> tuple[Settings, list[Record]]:
    """The compared configuration in `path`: ``(settings, records to inject at the start)``.

    Raises:
        CompareError: not readable YAML, not a mapping, or (for a settings file) settings that do not load.
    """
    try:
        data = yaml_load(path.read_text(encoding="utf-8"))  # refuses nesting too deep for PyYAML's recursion
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise CompareError(f"{path}: cannot read: {e}") from e
    if not isinstance(data, dict):
        raise CompareError(f"{path}: expected a mapping (agent settings or a fault-level table)")
    configmap = fault_config_data(data)
    if configmap is None:
        from agent.settings import SettingsError

        try:
            return load_settings(path), []
        except SettingsError as e:
            raise CompareError(str(e)) from e
    ns = base.kube.fault_config_namespace
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": FAULT_CONFIG_NAME, "namespace": ns, "uid": "replay-compare-fault-config",
                     "resourceVersion": "1"},
        "data": configmap,
    }  # fmt: skip
    return base, [Record(0, "ADDED", "configmaps", obj, None, f"<inject>{path}")]


def fault_config_data(data: Mapping[str, Any]) -> dict[str, str] | None:
    """The ``mindx-dl-fault-config`` ConfigMap data a fault-level file stands for; None when `data` is not one
    (an agent settings file). Pure."""
    keys = (FAULT_CONFIG_KEY, CUSTOMIZATION_KEY, SWITCH_CONFIG_KEY)
    if any(k in data for k in keys):
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in data.items() if k in keys}
    lists = {k: v for k, v in data.items() if k in LIST_LEVELS or k in NETWORK_LIST_LEVELS}
    rules = {k: v for k, v in data.items() if k in CUSTOMIZATION_FIELDS}
    if not lists and not rules:
        return None
    out: dict[str, str] = {}
    out[FAULT_CONFIG_KEY] = json.dumps(lists, sort_keys=True)  # "{}": no level overrides (the key must be there)
    if rules:
        out[CUSTOMIZATION_KEY] = json.dumps(rules, sort_keys=True)
    return out


@dataclass(frozen=True, slots=True)
class Difference:
    """One decision that differs: at `t` for `job`, `a` and `b` are the actions ("" when that side made none),
    `reason` that side's reason (B's when it decided, else A's)."""

    t: datetime
    job: str
    a: str
    b: str
    reason: str


DecisionRow = tuple[datetime, Fault, JobRecord, Decision]


def compare_decisions(a: Sequence[DecisionRow], b: Sequence[DecisionRow]) -> list[Difference]:
    """The decisions of `a` and `b` that differ, matched by (millisecond, job) in order; sorted by time, job. Pure.

    Two decisions at the same millisecond for the same job are paired in the order they were made; a decision
    one side made and the other did not (a fault one table raises and the other does not) is a difference with
    "" on the silent side.
    """

    def keyed(rows: Sequence[DecisionRow]) -> dict[tuple[str, str], list[Decision]]:
        out: dict[tuple[str, str], list[Decision]] = {}
        for t, _fault, job, decision in rows:
            out.setdefault((rfc3339_ms(t), f"{job.namespace}/{job.name}"), []).append(decision)
        return out

    times = {rfc3339_ms(t): t for t, *_ in [*a, *b]}
    ka, kb = keyed(a), keyed(b)
    diffs: list[Difference] = []
    for key in sorted(set(ka) | set(kb)):
        da, db = ka.get(key, []), kb.get(key, [])
        for i in range(max(len(da), len(db))):
            x = da[i] if i < len(da) else None
            y = db[i] if i < len(db) else None
            ax = x.action.value if x is not None else ""
            by = y.action.value if y is not None else ""
            if ax != by:
                reason = (y or x).reason if (y or x) is not None else ""  # type: ignore[union-attr]
                diffs.append(Difference(times[key[0]], key[1], ax, by, reason))
    return diffs


BREAKER_TRIPPED = "io.faultagent.breaker.tripped.v1"
"""The breaker.tripped event's type (agent.sinks.events.BREAKER_TRIPPED)."""


def breaker_trips(outputs: Iterable[Output]) -> list[Output]:
    """The breaker.tripped events of one replay's outputs, in order. After one, the agent decides but does not act
    until a reset, so two configurations can decide alike and still differ in what they do. Pure."""
    return [o for o in outputs if o.kind == EVENT and o.event_type == BREAKER_TRIPPED]


def totals(outputs: Iterable[Output]) -> dict[str, int]:
    """``{"decisions", "restarts", "quarantines", "aborts", "breaker_trips"}`` of one replay's outputs: restarts
    are restart-job / restart-pods / resubmit decisions (decided, also while the breaker is open), quarantines
    taint writes, aborts abort decisions, breaker trips breaker.tripped events. Pure."""
    restart = {Action.RESTART_JOB.value, Action.RESTART_PODS.value, Action.RESUBMIT.value}
    out = {"decisions": 0, "restarts": 0, "quarantines": 0, "aborts": 0, "breaker_trips": 0}
    for o in outputs:
        if o.kind == EVENT and o.event_type == BREAKER_TRIPPED:
            out["breaker_trips"] += 1
        elif o.kind == DECISION:
            out["decisions"] += 1
            out["restarts"] += o.action in restart
            out["aborts"] += o.action == Action.ABORT.value
        elif o.kind == WRITE and o.action == "taint-node":
            out["quarantines"] += 1
    return out
