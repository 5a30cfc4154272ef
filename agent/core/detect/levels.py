"""Fault levels of fault codes: the shipped table plus runtime overrides from ``mindx-dl-fault-config``.

Format of both sources (DOMAIN.md §1.3): eight lists named ``NotHandleFaultCodes``, ``RestartRequestCodes``,
``RestartBusinessCodes``, ``FreeRestartNPUCodes``, ``RestartNPUCodes``, ``SeparateNPUCodes``,
``PreSeparateNPUCodes``, ``SubHealthFaultCodes``; a code in several lists takes the most severe level.
The shipped table is ``agent/core/detect/data/fault_levels.yaml`` (documented copy in ``config/``); the overrides are
the ``faultCode.json`` key of the ``mindx-dl-fault-config`` ConfigMap in ``kube-system``.

How a fault's level is chosen (:meth:`LevelTable.resolve`):

1. when the override ConfigMap lists one of its codes, the most severe of the per-code levels, where each code's
   level is its override, else the level the reporter gave for that code, else the shipped table's;
2. else the level the reporter gave for the whole fault (device plugin ``fault_handling``, NodeD ``FaultLevel``);
3. else the most severe per-code level (reporter's, else shipped table);
4. else the level for unknown codes: ``SeparateNPU`` for a chip, ``PreSeparateNPU`` for a network or switch fault.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from types import MappingProxyType
from typing import Literal

import yaml

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.common import Rejections, is_code, parse_json
from agent.core.faults import FaultLevel, ObjectRef, Rejection

LIST_LEVELS: Mapping[str, FaultLevel] = MappingProxyType(
    {
        "NotHandleFaultCodes": FaultLevel.NOT_HANDLE,
        "RestartRequestCodes": FaultLevel.RESTART_REQUEST,
        "RestartBusinessCodes": FaultLevel.RESTART_BUSINESS,
        "FreeRestartNPUCodes": FaultLevel.FREE_RESTART_NPU,
        "RestartNPUCodes": FaultLevel.RESTART_NPU,
        "SeparateNPUCodes": FaultLevel.SEPARATE,
        "PreSeparateNPUCodes": FaultLevel.PRE_SEPARATE,
        "SubHealthFaultCodes": FaultLevel.SUB_HEALTH,
    }
)

FAULT_CONFIG_NAME = "mindx-dl-fault-config"
FAULT_CONFIG_KEY = "faultCode.json"

UnknownKind = Literal["chip", "network", "switch"]


class LevelTableError(Exception):
    """The shipped level table is unreadable: a packaging bug, raised at start-up, never for watched input."""


@dataclass(frozen=True, slots=True)
class LevelTable:
    """Code → level lookups. Immutable; a reload builds a new table with :meth:`with_overrides`.

    Attributes:
        shipped: upper-case code → level from the packaged YAML.
        overrides: upper-case code → level from ``faultCode.json`` (empty when no ConfigMap).
        unknown: level of a code found nowhere, per fault kind.
        flap_threshold_by_code: per-code flapping thresholds refining the settings' default.
    """

    shipped: Mapping[str, FaultLevel]
    overrides: Mapping[str, FaultLevel] = field(default_factory=dict)
    unknown: Mapping[str, FaultLevel] = field(
        default_factory=lambda: {
            "chip": FaultLevel.SEPARATE,
            "network": FaultLevel.PRE_SEPARATE,
            "switch": FaultLevel.PRE_SEPARATE,
        }
    )
    flap_threshold_by_code: Mapping[str, int] = field(default_factory=dict)

    def with_overrides(self, overrides: Mapping[str, FaultLevel]) -> LevelTable:
        """A copy using `overrides` (replacing any earlier ones)."""
        return replace(self, overrides=dict(overrides))

    def code_level(self, code: str, reported: FaultLevel | None = None) -> FaultLevel | None:
        """Level of one upper-case code: override, else `reported` (the reporter's own), else shipped, else None."""
        level = self.overrides.get(code)
        if level is not None:
            return level
        if reported is not None:
            return reported
        return self.shipped.get(code)

    def resolve(
        self,
        codes: tuple[str, ...],
        reported: FaultLevel | None,
        reported_by_code: Mapping[str, FaultLevel],
        unknown: UnknownKind,
    ) -> FaultLevel:
        """The level of a fault with `codes` (see the module docstring for the order of precedence)."""
        if self.overrides and any(c in self.overrides for c in codes):
            levels = [self.code_level(c, reported_by_code.get(c)) for c in codes]
            return max(self.unknown[unknown] if lvl is None else lvl for lvl in levels)
        if reported is not None:
            return reported
        known = [lvl for c in codes if (lvl := self.code_level(c, reported_by_code.get(c))) is not None]
        if known:
            return max(known)
        return self.unknown[unknown]


_PUBLIC_CODE = re.compile(r"[0-9A-Za-z_.-]{9}")
"""A public-fault code (MindCluster's public-fault interface: 9 user-defined characters)."""


def parse_level_lists(obj: object, what: str, rej: Rejections) -> dict[str, FaultLevel]:
    """Read the eight level lists from a parsed mapping; most severe wins for a code listed twice.

    Rejections: ``wrong-type`` (not a mapping, a list that is not a list of strings), ``unknown-list``
    (a key ending in ``Codes`` that is not one of the eight), ``bad-code`` (neither 8 hex digits nor a
    9-character public-fault code).
    """
    out: dict[str, FaultLevel] = {}
    if not isinstance(obj, dict):
        rej.add("wrong-type", f"{what}: expected object, got {type(obj).__name__}")
        return out
    for key, value in obj.items():
        level = LIST_LEVELS.get(key)
        if level is None:
            if isinstance(key, str) and key.endswith("Codes"):
                rej.add("unknown-list", f"{what}: unknown list {key[:60]!r}")
            continue
        if not isinstance(value, list):
            rej.add("wrong-type", f"{what}.{key}: expected list, got {type(value).__name__}")
            continue
        for code in value:
            # chip/node codes are 8 hex digits; MindCluster public-fault codes are 9 user-defined characters
            if not isinstance(code, str) or not (is_code(code.strip()) or _PUBLIC_CODE.fullmatch(code.strip())):
                rej.add(
                    "bad-code",
                    f"{what}.{key}: {str(code)[:40]!r} is neither an 8-hex-digit code "
                    "nor a 9-character public-fault code",
                )
                continue
            c = code.strip().upper()
            if c not in out or level > out[c]:
                out[c] = level
    return out


def load_shipped_table(text: str | None = None) -> LevelTable:
    """Load the packaged level table (or `text`, YAML in the same format, for tests).

    Raises:
        LevelTableError: the YAML is malformed or names an unknown level (a packaging bug).
    """
    if text is None:
        text = resources.files("agent.core.detect").joinpath("data/fault_levels.yaml").read_text(encoding="utf-8")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise LevelTableError(f"fault level table: not valid YAML: {e}") from e
    if not isinstance(doc, dict):
        raise LevelTableError("fault level table: top level must be a mapping")
    rej = Rejections(ObjectRef("File", "", "fault_levels.yaml"))
    shipped = parse_level_lists(doc, "fault_levels.yaml", rej)
    unknown: dict[str, FaultLevel] = {}
    for kind, name in (doc.get("unknown") or {}).items():
        try:
            unknown[str(kind)] = FaultLevel.parse(str(name))
        except ValueError as e:
            raise LevelTableError(f"fault level table: unknown.{kind}: {e}") from e
    flap = (doc.get("flapping") or {}).get("threshold_by_code") or {}
    thresholds = {str(k).upper(): int(v) for k, v in flap.items()}
    if rej.items:
        raise LevelTableError("fault level table: " + "; ".join(f"{r.reason}: {r.detail}" for r in rej.items))
    table = LevelTable(shipped=shipped, flap_threshold_by_code=thresholds)
    if unknown:
        table = replace(table, unknown={**table.unknown, **unknown})
    return table


def parse_fault_config(
    cm: ConfigMapRecord | Mapping[str, str], source: ObjectRef | None = None
) -> tuple[dict[str, FaultLevel] | None, list[Rejection]]:
    """Read the overrides of the ``mindx-dl-fault-config`` ConfigMap (key ``faultCode.json``).

    Args:
        cm: the ConfigMap record, or its ``data`` dict (then `source` names it in rejections).

    Returns:
        (overrides, rejections): overrides is None when the key is missing or unreadable (keep the previous
        overrides), else code → most severe level. Rejections: ``missing-key`` and those of
        :func:`agent.core.detect.common.parse_json` and :func:`parse_level_lists`. Never raises.
    """
    if isinstance(cm, ConfigMapRecord):
        data: Mapping[str, str] = cm.data
        source = ObjectRef("ConfigMap", cm.namespace, cm.name, cm.uid)
    else:
        data = cm
        source = source or ObjectRef("ConfigMap", "kube-system", FAULT_CONFIG_NAME)
    rej = Rejections(source)
    text = data.get(FAULT_CONFIG_KEY)
    if not isinstance(text, str):
        rej.add("missing-key", f"{FAULT_CONFIG_KEY} is missing")
        return None, rej.items
    obj = parse_json(text, FAULT_CONFIG_KEY, rej)
    if obj is None:
        return None, rej.items
    if not isinstance(obj, dict):
        rej.add("wrong-type", f"{FAULT_CONFIG_KEY}: expected object, got {type(obj).__name__}")
        return None, rej.items
    return parse_level_lists(obj, FAULT_CONFIG_KEY, rej), rej.items
