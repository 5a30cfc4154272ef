"""Fault levels of fault codes: the shipped tables plus runtime overrides from ``mindx-dl-fault-config``.

Shipped tables (generated from MindCluster's release files by testbed/tools/gen_fault_tables.py, each naming its
source path and commit; DOMAIN.md §1.3):
- chip and network codes: ``agent/core/detect/data/fault_levels.yaml`` (documented copy in ``config/``), the eight
  lists ``NotHandleFaultCodes``, ``RestartRequestCodes``, ``RestartBusinessCodes``, ``FreeRestartNPUCodes``,
  ``RestartNPUCodes``, ``SeparateNPUCodes``, ``PreSeparateNPUCodes``, ``SubHealthFaultCodes`` of the device
  plugin's faultCode.json plus its four network lists ``NotHandleFaultNetworkCodes``, ``PreSeparateNPUNetworkCodes``,
  ``SeparateNPUNetworkCodes``, ``SubHealthFaultNetworkCodes`` (component/ascend-device-plugin/pkg/common/fault_code.go
  ``faultFileInfo``);
- A3 switch codes: ``switch_fault_levels.yaml`` (SwitchFaultCode.json, switch vocabulary);
- NodeD codes: ``noded_fault_levels.yaml`` (NodeDConfiguration.json ``FaultTypeCode``);
- public-fault codes: ``public_fault_levels.yaml`` (ClusterD's publicFaultConfiguration.json);
- flapping rules: ``fault_customization.yaml`` (agent.core.detect.customization).

A code in several lists takes the most severe level. The overrides are the ``faultCode.json``,
``SwitchFaultCode.json`` and ``faultCustomization.json`` keys of the ``mindx-dl-fault-config`` ConfigMap in
``kube-system``, the device plugin's own keys (component/ascend-device-plugin/pkg/server/manager.go).

How a fault's level is chosen (:meth:`LevelTable.resolve`): **a level the reporter wrote is final** (the device
plugin's ``fault_handling``, NodeD's ``FaultLevel``, a switch event's level): the device plugin has already applied
the same ConfigMap and its frequency and duration escalations, so a table never replaces it. Only a fault the
reporter left without a level, or with one the agent does not know, gets one from the tables: per code the
reporter's per-code level, else the override, else the shipped table, the most severe of its codes; else the level
for unknown codes (SeparateNPU for a chip, PreSeparateNPU for a network or switch fault).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from types import MappingProxyType
from typing import Literal

import yaml

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.common import Rejections, is_code, is_public_code, json_type, parse_json
from agent.core.detect.customization import (
    CUSTOMIZATION_KEY,
    FaultCustomization,
    load_shipped_customization,
    parse_customization_text,
)
from agent.core.faults import Fault, FaultLevel, ObjectRef, Rejection

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
"""The chip lists of faultCode.json (and of public-fault tables, which use four of the names)."""

NETWORK_LIST_LEVELS: Mapping[str, FaultLevel] = MappingProxyType(
    {
        "NotHandleFaultNetworkCodes": FaultLevel.NOT_HANDLE,
        "PreSeparateNPUNetworkCodes": FaultLevel.PRE_SEPARATE,
        "SeparateNPUNetworkCodes": FaultLevel.SEPARATE,
        "SubHealthFaultNetworkCodes": FaultLevel.SUB_HEALTH,
    }
)
"""The four network lists of faultCode.json (fault_code.go ``faultFileInfo``): levels of parameter-plane network
faults (``CardNetworkUnhealthy``)."""

SWITCH_LIST_LEVELS: Mapping[str, FaultLevel] = MappingProxyType(
    {
        "NotHandleFaultCodes": FaultLevel.NOT_HANDLE,
        "SubHealthFaultCodes": FaultLevel.SUB_HEALTH,
        "RestartRequestFaultCodes": FaultLevel.RESTART_REQUEST,
        "PreSeparateFaultCodes": FaultLevel.PRE_SEPARATE,
        "ResetFaultCodes": FaultLevel.SEPARATE,
        "SeparateFaultCodes": FaultLevel.SEPARATE,
    }
)
"""SwitchFaultCode.json's lists (fault_code.go ``SwitchFaultFileInfo``; ResetFaultCodes count as Separate), on the
chip scale (agent.core.detect.switchinfo maps the switch vocabulary the same way)."""

NODED_REASON_PREFIX = "NodeD-"
"""Every NodeD fault's reason starts with this (``NodeD-<DeviceType>``, ``NodeD-<NodeStatus>``)."""
NODED_LEVEL_NAMES: Mapping[FaultLevel, str] = MappingProxyType(
    {
        FaultLevel.NOT_HANDLE: "NotHandleFault",
        FaultLevel.PRE_SEPARATE: "PreSeparateFault",
        FaultLevel.SEPARATE: "SeparateFault",
    }
)
"""NodeD's own names of its three levels (MindCluster ``component/noded/pkg/common/constants.go``); the agent folds
them onto the chip scale (:class:`~agent.core.faults.FaultLevel`) to order them, and writes them back with
:func:`level_name`."""


def level_name(fault: Fault) -> str:
    """The name of `fault`'s level in its reporter's vocabulary, for events, logs and the command line: NodeD's
    (``SeparateFault``, ``PreSeparateFault``, ``NotHandleFault``) for a NodeD fault (its own ConfigMap or
    ClusterD's node entry), else the chip level's (``SeparateNPU``, …). A NodeD fault at a level NodeD has no
    name for (a level-table override) keeps the chip name."""
    if fault.reason.startswith(NODED_REASON_PREFIX):
        name = NODED_LEVEL_NAMES.get(fault.level)
        if name is not None:
            return name
    return fault.level.wire_name


NODED_LIST_LEVELS: Mapping[str, FaultLevel] = MappingProxyType(
    {
        "NotHandleFaultCodes": FaultLevel.NOT_HANDLE,
        "PreSeparateFaultCodes": FaultLevel.PRE_SEPARATE,
        "SeparateFaultCodes": FaultLevel.SEPARATE,
    }
)
"""NodeDConfiguration.json ``FaultTypeCode`` lists, on the chip scale (model.FaultLevel folds NodeD's levels)."""

FAULT_CONFIG_NAME = "mindx-dl-fault-config"
FAULT_CONFIG_KEY = "faultCode.json"
SWITCH_CONFIG_KEY = "SwitchFaultCode.json"

UnknownKind = Literal["chip", "network", "switch"]
CodeKind = Literal["chip", "network", "switch", "node"]

_SWITCH_CODE = re.compile(r"\[[^\[\],]{1,40}(,[^\[\],]{1,40}){3}\]")
"""An A3 switch code as SwitchFaultCode.json writes it: ``[0x00f103b0,155907,na,na]`` (four comma parts)."""


def switch_code_key(code: str) -> str:
    """The lookup form of a switch code: spaces removed, lower case (``[0x00F103B0, 155907,na,na]`` and
    ``[0x00f103b0,155907,na,na]`` are the same code)."""
    return code.replace(" ", "").lower()


class LevelTableError(Exception):
    """The shipped level table is unreadable: a packaging bug, raised at start-up, never for watched input."""


@dataclass(frozen=True, slots=True)
class LevelTable:
    """Code → level lookups per kind of code. Immutable; a reload builds a new table with :meth:`with_overrides`.

    Attributes:
        shipped: upper-case chip code → level (faultCode.json's eight lists).
        overrides: upper-case chip code → level from the ConfigMap's ``faultCode.json`` (empty when none).
        unknown: level of a code found nowhere, per fault kind.
        network: upper-case network code → level (the four network lists, shipped).
        network_overrides: the same from the ConfigMap.
        switch: switch code (:func:`switch_code_key`) → level, shipped (SwitchFaultCode.json).
        switch_overrides: the same from the ConfigMap's ``SwitchFaultCode.json``.
        noded: upper-case NodeD code → level (NodeDConfiguration.json).
        public: public-fault code → level (ClusterD's publicFaultConfiguration.json).
        customization: the frequency and duration rules in force (shipped, or the ConfigMap's).
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
    network: Mapping[str, FaultLevel] = field(default_factory=dict)
    network_overrides: Mapping[str, FaultLevel] = field(default_factory=dict)
    switch: Mapping[str, FaultLevel] = field(default_factory=dict)
    switch_overrides: Mapping[str, FaultLevel] = field(default_factory=dict)
    noded: Mapping[str, FaultLevel] = field(default_factory=dict)
    public: Mapping[str, FaultLevel] = field(default_factory=dict)
    customization: FaultCustomization = field(default_factory=FaultCustomization)
    shipped_customization: FaultCustomization = field(default_factory=FaultCustomization)

    def with_overrides(self, overrides: Mapping[str, FaultLevel]) -> LevelTable:
        """A copy using `overrides` (replacing any earlier ones). A :class:`FaultConfig` also replaces the network
        and switch overrides and the flapping rules (its parts that could not be read keep the current ones); a
        plain mapping replaces the chip overrides only."""
        if not isinstance(overrides, FaultConfig):
            return replace(self, overrides=dict(overrides))
        cfg = overrides
        return replace(
            self,
            overrides=dict(cfg.chip) if cfg.chip is not None else self.overrides,
            network_overrides=dict(cfg.network) if cfg.network is not None else self.network_overrides,
            switch_overrides=dict(cfg.switch) if cfg.switch is not None else self.switch_overrides,
            customization=cfg.customization if cfg.customization is not None else self.shipped_customization,
        )

    def code_level(self, code: str, reported: FaultLevel | None = None, kind: CodeKind = "chip") -> FaultLevel | None:
        """Level of one code of `kind`: `reported` (the reporter's own), else the override, else the shipped
        table, else None. A network code found in no network list falls back to the chip lists (the device
        plugin's loader copies a network code listed there into the network lists); a switch code is looked up in
        its :func:`switch_code_key` form."""
        if reported is not None:
            return reported
        if kind == "switch":
            key = switch_code_key(code)
            return self.switch_overrides.get(key) or self.switch.get(key)
        if kind == "node":
            return self.overrides.get(code) or self.noded.get(code)
        if kind == "network":
            level = self.network_overrides.get(code) or self.network.get(code)
            if level is not None:
                return level
        level = self.overrides.get(code)
        return level if level is not None else self.shipped.get(code)

    def public_level(self, code: str) -> FaultLevel | None:
        """Level of a public-fault code: the ConfigMap's override, else ClusterD's public table, else None."""
        level = self.overrides.get(code)
        return level if level is not None else self.public.get(code)

    def resolve(
        self,
        codes: tuple[str, ...],
        reported: FaultLevel | None,
        reported_by_code: Mapping[str, FaultLevel],
        unknown: UnknownKind,
        kind: CodeKind | None = None,
    ) -> FaultLevel:
        """The level of a fault with `codes`: `reported` when the reporter wrote one (final), else the most
        severe per-code level (:meth:`code_level` of `kind`, default `unknown`), else the unknown-code level."""
        if reported is not None:
            return reported
        k: CodeKind = kind or unknown
        known = [lvl for c in codes if (lvl := self.code_level(c, reported_by_code.get(c), k)) is not None]
        if known:
            return max(known)
        return self.unknown[unknown]


class FaultConfig(Mapping[str, FaultLevel]):
    """What the ``mindx-dl-fault-config`` ConfigMap says; as a mapping, its chip overrides (code → level).

    Attributes:
        chip: ``faultCode.json``'s eight lists, code → most severe level; None when that key was unreadable
            (the previous overrides stay).
        network: its four network lists; None like `chip`.
        switch: ``SwitchFaultCode.json``'s lists (switch code key → level); empty when the key is absent, None
            when unreadable.
        customization: ``faultCustomization.json``'s rules; None when absent or unreadable (the shipped
            defaults apply, as the device plugin falls back to its file).
    """

    def __init__(
        self,
        chip: Mapping[str, FaultLevel] | None,
        network: Mapping[str, FaultLevel] | None = None,
        switch: Mapping[str, FaultLevel] | None = None,
        customization: FaultCustomization | None = None,
    ) -> None:
        self.chip = chip
        self.network = network if network is not None else ({} if chip is not None else None)
        self.switch = switch
        self.customization = customization

    def __getitem__(self, code: str) -> FaultLevel:
        if self.chip is None:
            raise KeyError(code)
        return self.chip[code]

    def __iter__(self) -> Iterator[str]:
        return iter(self.chip or {})

    def __len__(self) -> int:
        return len(self.chip or {})


def parse_level_lists(
    obj: object,
    what: str,
    rej: Rejections,
    lists: Mapping[str, FaultLevel] = LIST_LEVELS,
    *,
    network: dict[str, FaultLevel] | None = None,
    switch: bool = False,
) -> dict[str, FaultLevel]:
    """Read level lists from a parsed mapping; most severe wins for a code listed twice.

    Args:
        lists: list name → level (default: faultCode.json's eight chip lists).
        network: when given, the four network lists are read into it (else they are unknown lists).
        switch: codes are A3 switch codes (``[0x00f103b0,155907,na,na]``), stored as :func:`switch_code_key`.

    Rejections: ``wrong-type`` (not a mapping, a list that is not a list of strings), ``unknown-list``
    (a key ending in ``Codes`` that is not one of the lists), ``bad-code`` (neither 8 hex digits nor a
    9-character public-fault code; for switch codes, not of the four-part form).
    """
    out: dict[str, FaultLevel] = {}
    if not isinstance(obj, dict):
        rej.add("wrong-type", f"{what}: expected object, got {json_type(obj)}")
        return out
    for key, value in obj.items():
        level = lists.get(key)
        target = out
        if level is None and network is not None:
            level = NETWORK_LIST_LEVELS.get(key)
            target = network
        if level is None:
            if isinstance(key, str) and key.endswith("Codes"):
                rej.add("unknown-list", f"{what}: unknown list {key[:60]!r}")
            continue
        if not isinstance(value, list):
            rej.add("wrong-type", f"{what}.{key}: expected list, got {json_type(value)}")
            continue
        for code in value:
            if switch:
                if not isinstance(code, str) or not _SWITCH_CODE.fullmatch(code.replace(" ", "")):
                    rej.add(
                        "bad-code",
                        f"{what}.{key}: {str(code)[:60]!r} is not a switch code like [0x00f103b0,155907,na,na]",
                    )
                    continue
                c = switch_code_key(code)
            else:
                # chip/node codes are 8 hex digits; MindCluster public-fault codes are 9 user-defined characters
                if not isinstance(code, str) or not (is_code(code.strip()) or is_public_code(code.strip())):
                    rej.add(
                        "bad-code",
                        f"{what}.{key}: {str(code)[:40]!r} is neither an 8-hex-digit code "
                        "nor a 9-character public-fault code",
                    )
                    continue
                c = code.strip().upper()
            if c not in target or level > target[c]:
                target[c] = level
    return out


def _yaml(text: str, name: str) -> dict[str, object]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise LevelTableError(f"{name}: not valid YAML: {e}") from e
    if not isinstance(doc, dict):
        raise LevelTableError(f"{name}: top level must be a mapping")
    return doc


def _lists(
    doc: Mapping[str, object], name: str, lists: Mapping[str, FaultLevel], **kw: object
) -> dict[str, FaultLevel]:
    rej = Rejections(ObjectRef("File", "", name))
    body = {k: v for k, v in doc.items() if k not in ("version", "source", "unknown", "publicFaultResource")}
    out = parse_level_lists(body, name, rej, lists, **kw)  # type: ignore[arg-type]
    if rej.items:
        raise LevelTableError(f"{name}: " + "; ".join(f"{r.reason}: {r.detail}" for r in rej.items))
    return out


def load_shipped_table(text: str | None = None) -> LevelTable:
    """Load the packaged tables: chip and network codes (or `text`, YAML in the same format, for tests), switch,
    NodeD and public-fault codes and the flapping rules (agent/core/detect/data/, generated from MindCluster's files).

    Raises:
        LevelTableError: a file is malformed or names an unknown level (a packaging bug).
    """
    data = resources.files("agent.core.detect").joinpath("data")
    texts = {
        name: data.joinpath(name).read_text(encoding="utf-8")
        for name in (
            "fault_levels.yaml",
            "switch_fault_levels.yaml",
            "noded_fault_levels.yaml",
            "public_fault_levels.yaml",
            "fault_customization.yaml",
        )
    }
    doc = _yaml(text if text is not None else texts["fault_levels.yaml"], "fault_levels.yaml")
    network: dict[str, FaultLevel] = {}
    shipped = _lists(doc, "fault_levels.yaml", LIST_LEVELS, network=network)
    unknown: dict[str, FaultLevel] = {}
    raw_unknown = doc.get("unknown") or {}
    if not isinstance(raw_unknown, dict):
        raise LevelTableError("fault_levels.yaml: unknown must be a mapping")
    for kind, lname in raw_unknown.items():
        try:
            unknown[str(kind)] = FaultLevel.parse(str(lname))
        except ValueError as e:
            raise LevelTableError(f"fault level table: unknown.{kind}: {e}") from e
    switch = _lists(
        _yaml(texts["switch_fault_levels.yaml"], "switch"), "switch_fault_levels.yaml", SWITCH_LIST_LEVELS, switch=True
    )
    noded = _lists(_yaml(texts["noded_fault_levels.yaml"], "noded"), "noded_fault_levels.yaml", NODED_LIST_LEVELS)
    public = _lists(_yaml(texts["public_fault_levels.yaml"], "public"), "public_fault_levels.yaml", LIST_LEVELS)
    rules = load_shipped_customization(texts["fault_customization.yaml"])
    table = LevelTable(
        shipped=MappingProxyType(shipped),
        network=MappingProxyType(network),
        switch=MappingProxyType(switch),
        noded=MappingProxyType(noded),
        public=MappingProxyType(public),
        customization=rules,
        shipped_customization=rules,
    )
    if unknown:
        table = replace(table, unknown={**table.unknown, **unknown})
    return table


def parse_fault_config(
    cm: ConfigMapRecord | Mapping[str, str], source: ObjectRef | None = None
) -> tuple[FaultConfig | None, list[Rejection]]:
    """Read the ``mindx-dl-fault-config`` ConfigMap: keys ``faultCode.json`` (chip and network lists),
    ``SwitchFaultCode.json`` (switch lists) and ``faultCustomization.json`` (flapping rules), as the device plugin
    reads them (component/ascend-device-plugin/pkg/server/manager.go ``loadFaultCode``, ``loadSwitchFaultCode``,
    ``loadFaultCustomization``).

    Args:
        cm: the ConfigMap record, or its ``data`` dict (then `source` names it in rejections).

    Returns:
        (config, rejections): config is None when ``faultCode.json`` is missing or unreadable and the ConfigMap has
        no other key of ours (keep everything as it is); else a :class:`FaultConfig` whose unreadable parts are
        None. Rejections: ``missing-key`` (no ``faultCode.json``) and those of
        :func:`agent.core.detect.common.parse_json`, :func:`parse_level_lists` and
        :func:`agent.core.detect.customization.parse_customization`. Never raises.
    """
    if isinstance(cm, ConfigMapRecord):
        data: Mapping[str, str] = cm.data
        source = ObjectRef("ConfigMap", cm.namespace, cm.name, cm.uid)
    else:
        data = cm
        source = source or ObjectRef("ConfigMap", "kube-system", FAULT_CONFIG_NAME)
    rej = Rejections(source)
    chip: dict[str, FaultLevel] | None = None
    network: dict[str, FaultLevel] | None = None
    text = data.get(FAULT_CONFIG_KEY)
    if not isinstance(text, str):
        rej.add("missing-key", f"{FAULT_CONFIG_KEY} is missing")
    elif (obj := parse_json(text, FAULT_CONFIG_KEY, rej)) is not None:
        if not isinstance(obj, dict):
            rej.add("wrong-type", f"{FAULT_CONFIG_KEY}: expected object, got {json_type(obj)}")
        else:
            network = {}
            chip = parse_level_lists(obj, FAULT_CONFIG_KEY, rej, network=network)
    switch: dict[str, FaultLevel] | None = {}
    stext = data.get(SWITCH_CONFIG_KEY)
    if isinstance(stext, str):
        sobj = parse_json(stext, SWITCH_CONFIG_KEY, rej)
        switch = (
            None if sobj is None else parse_level_lists(sobj, SWITCH_CONFIG_KEY, rej, SWITCH_LIST_LEVELS, switch=True)
        )
    ctext = data.get(CUSTOMIZATION_KEY)
    rules = parse_customization_text(ctext, rej) if isinstance(ctext, str) else None
    if chip is None and not isinstance(stext, str) and not isinstance(ctext, str):
        return None, rej.items
    return FaultConfig(chip, network, switch, rules), rej.items
