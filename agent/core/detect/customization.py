"""Per-code flapping rules in MindCluster's ``faultCustomization.json`` format. Pure: parsing and validation only.

Format (MindCluster device plugin, component/ascend-device-plugin/build/faultCustomization.json, read by
component/ascend-device-plugin/pkg/common/fault_code.go ``LoadFaultCustomization``; the same key of the
``mindx-dl-fault-config`` ConfigMap replaces the file)::

    {"FaultFrequency": [{"EventId": [code, …], "TimeWindow": s, "Times": n, "FaultHandling": level,
                         "ReleaseTimeWindow": s (optional)}, …],
     "FaultDuration":  [{"EventId": [code, …], "FaultTimeout": s, "RecoverTimeout": s, "FaultHandling": level}, …],
     "GraceTolerance": {…}}

Validation follows the device plugin's (``validateFaultFrequencyCustomization`` and
``validateFaultDurationCustomization``, limits in component/ascend-device-plugin/pkg/common/constants.go): a rule
outside the limits is skipped with a rejection, the others still apply; an event id in two rules of one section
keeps the first rule. Frequency: ``TimeWindow`` 60–864000 s, ``Times`` 1–100, ``ReleaseTimeWindow`` 0 or absent
(never released) else 60–2^32 s, ``FaultHandling`` any chip level, and a level other than ManuallySeparateNPU
needs a ``ReleaseTimeWindow``. Duration: ``FaultTimeout`` 0–600 s, ``RecoverTimeout`` 0–86400 s,
``FaultHandling`` any chip level but ManuallySeparateNPU. ``GraceTolerance`` (the plugin's own reset timings) is
ignored. The shipped defaults are ``agent/core/detect/data/fault_customization.yaml``, generated from MindCluster's
file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import yaml

from agent.core.detect.common import Rejections, json_type, parse_json
from agent.core.faults import FaultLevel, ObjectRef

CUSTOMIZATION_KEY = "faultCustomization.json"
"""Key of the ``mindx-dl-fault-config`` ConfigMap holding the rules (constants.go ``FaultCustomizationKey``)."""

MIN_TIME_WINDOW, MAX_TIME_WINDOW = 60, 864000
MIN_TIMES, MAX_TIMES = 1, 100
MIN_RELEASE, MAX_RELEASE = 60, 1 << 32
MIN_FAULT_TIMEOUT, MAX_FAULT_TIMEOUT = 0, 600
MIN_RECOVER_TIMEOUT, MAX_RECOVER_TIMEOUT = 0, 86400


class CustomizationError(Exception):
    """The shipped rules are unreadable: a packaging bug, raised at start-up, never for watched input."""


@dataclass(frozen=True, slots=True)
class FrequencyRule:
    """One ``FaultFrequency`` rule as it applies to one code.

    Attributes:
        time_window_s: the sliding window, seconds.
        times: occurrences of the code on one chip within the window that trip the rule.
        handling: the level a tripped chip gets (ManuallySeparateNPU: the chip is isolated).
        release_s: seconds the chip must be free of the code before the escalation is lifted; None: never
            (MindCluster keeps a ManuallySeparateNPU chip out until an operator clears it).
    """

    time_window_s: int
    times: int
    handling: FaultLevel
    release_s: int | None = None


@dataclass(frozen=True, slots=True)
class DurationRule:
    """One ``FaultDuration`` rule as it applies to one code.

    Attributes:
        fault_timeout_s: a fault with the code active longer than this (seconds) gets `handling`.
        recover_timeout_s: the escalation lasts until the code has been gone this long (seconds).
        handling: the level of a fault past its timeout.
    """

    fault_timeout_s: int
    recover_timeout_s: int
    handling: FaultLevel


@dataclass(frozen=True, slots=True)
class FaultCustomization:
    """Upper-case code → its frequency rule and its duration rule."""

    frequency: Mapping[str, FrequencyRule] = field(default_factory=dict)
    duration: Mapping[str, DurationRule] = field(default_factory=dict)


def _int(rule: Mapping[str, object], key: str, what: str, rej: Rejections, *, required: bool = True) -> int | None:
    value = rule.get(key)
    if value is None:
        if required:
            rej.add("missing-key", f"{what}.{key} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        rej.add("wrong-type", f"{what}.{key}: expected integer, got {json_type(value)}")
        return None
    return value


def _range(value: int, lo: int, hi: int, what: str, rej: Rejections) -> bool:
    if lo <= value <= hi:
        return True
    rej.add("out-of-range", f"{what}: {value} is outside {lo}–{hi}")
    return False


def _codes(rule: Mapping[str, object], what: str, rej: Rejections) -> list[str] | None:
    ids = rule.get("EventId")
    if not isinstance(ids, list) or not ids:
        rej.add("missing-key" if not ids else "wrong-type", f"{what}.EventId: expected a non-empty list of codes")
        return None
    out: list[str] = []
    for code in ids:
        c = code.strip().upper() if isinstance(code, str) else ""
        try:
            int(c, 16)
        except ValueError:
            rej.add("bad-code", f"{what}.EventId: {str(code)[:40]!r} is not a hexadecimal code")
            continue
        out.append(c)
    return out


def _handling(rule: Mapping[str, object], what: str, rej: Rejections) -> FaultLevel | None:
    value = rule.get("FaultHandling")
    if not isinstance(value, str):
        rej.add("missing-key" if value is None else "wrong-type", f"{what}.FaultHandling missing or not a string")
        return None
    try:
        level = FaultLevel.parse(value)
    except ValueError:
        level = None
    if level is None or value != level.wire_name:  # NodeD spellings are not chip levels
        rej.add("unknown-level", f"{what}.FaultHandling: {value[:40]!r}")
        return None
    return level


def parse_customization(obj: object, what: str, rej: Rejections) -> FaultCustomization:
    """Read ``FaultFrequency`` and ``FaultDuration`` from a parsed ``faultCustomization.json`` object.

    Rejections (each skips one rule or one code, never the rest): ``wrong-type``, ``missing-key``,
    ``out-of-range``, ``unknown-level``, ``release-required`` (a level other than ManuallySeparateNPU without a
    ReleaseTimeWindow), ``bad-code``, ``duplicate-code`` (a code already in an earlier rule of the section: the
    earlier rule is kept, as the device plugin does). Never raises.
    """
    if not isinstance(obj, dict):
        rej.add("wrong-type", f"{what}: expected object, got {json_type(obj)}")
        return FaultCustomization()
    frequency: dict[str, FrequencyRule] = {}
    duration: dict[str, DurationRule] = {}
    for section in ("FaultFrequency", "FaultDuration"):
        rules = obj.get(section)
        if rules is None:
            continue
        if not isinstance(rules, list):
            rej.add("wrong-type", f"{what}.{section}: expected array, got {json_type(rules)}")
            continue
        for i, rule in enumerate(rules):
            rwhat = f"{what}.{section}[{i}]"
            if not isinstance(rule, dict):
                rej.add("wrong-type", f"{rwhat}: expected object, got {json_type(rule)}")
                continue
            codes = _codes(rule, rwhat, rej)
            if codes is None:
                continue
            parsed: FrequencyRule | DurationRule | None
            if section == "FaultFrequency":
                parsed = _frequency(rule, rwhat, rej)
                target: dict[str, FrequencyRule] | dict[str, DurationRule] = frequency
            else:
                parsed = _duration(rule, rwhat, rej)
                target = duration
            if parsed is None:
                continue
            for code in codes:
                if code in target:
                    rej.add("duplicate-code", f"{rwhat}.EventId: {code} is in an earlier rule, which is kept")
                    continue
                target[code] = parsed  # type: ignore[assignment]
    return FaultCustomization(MappingProxyType(frequency), MappingProxyType(duration))


def _frequency(rule: Mapping[str, object], what: str, rej: Rejections) -> FrequencyRule | None:
    window = _int(rule, "TimeWindow", what, rej)
    times = _int(rule, "Times", what, rej)
    release = _int(rule, "ReleaseTimeWindow", what, rej, required=False)
    handling = _handling(rule, what, rej)
    if window is None or times is None or handling is None:
        return None
    if not _range(window, MIN_TIME_WINDOW, MAX_TIME_WINDOW, f"{what}.TimeWindow", rej):
        return None
    if not _range(times, MIN_TIMES, MAX_TIMES, f"{what}.Times", rej):
        return None
    if release == 0 or release == MAX_RELEASE:
        release = None  # the device plugin's "never released"
    if release is not None and not _range(release, MIN_RELEASE, MAX_RELEASE, f"{what}.ReleaseTimeWindow", rej):
        return None
    if release is None and handling is not FaultLevel.MANUALLY_SEPARATE:
        rej.add("release-required", f"{what}: FaultHandling {handling.wire_name} needs a ReleaseTimeWindow")
        return None
    return FrequencyRule(window, times, handling, release)


def _duration(rule: Mapping[str, object], what: str, rej: Rejections) -> DurationRule | None:
    timeout = _int(rule, "FaultTimeout", what, rej)
    recover = _int(rule, "RecoverTimeout", what, rej)
    handling = _handling(rule, what, rej)
    if timeout is None or recover is None or handling is None:
        return None
    if not _range(timeout, MIN_FAULT_TIMEOUT, MAX_FAULT_TIMEOUT, f"{what}.FaultTimeout", rej):
        return None
    if not _range(recover, MIN_RECOVER_TIMEOUT, MAX_RECOVER_TIMEOUT, f"{what}.RecoverTimeout", rej):
        return None
    if handling is FaultLevel.MANUALLY_SEPARATE:
        rej.add("unknown-level", f"{what}.FaultHandling: ManuallySeparateNPU is not a FaultDuration level")
        return None
    return DurationRule(timeout, recover, handling)


def parse_customization_text(text: str, rej: Rejections) -> FaultCustomization | None:
    """The ``faultCustomization.json`` value of the fault-config ConfigMap; None when it is not readable JSON
    (then the shipped defaults apply, as the device plugin falls back to its file)."""
    obj = parse_json(text, CUSTOMIZATION_KEY, rej)
    if obj is None:
        return None
    return parse_customization(obj, CUSTOMIZATION_KEY, rej)


def load_shipped_customization(text: str) -> FaultCustomization:
    """The packaged rules: `text` is ``agent/core/detect/data/fault_customization.yaml`` (MindCluster's defaults),
    which :func:`agent.core.detect.levels.load_shipped_table` reads with the other tables.

    Raises:
        CustomizationError: the file is not valid YAML or a rule is invalid (a packaging bug).
    """
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise CustomizationError(f"fault customization: not valid YAML: {e}") from e
    rej = Rejections(ObjectRef("File", "", "fault_customization.yaml"))
    rules = parse_customization(doc, "fault_customization.yaml", rej)
    if rej.items:
        raise CustomizationError("fault customization: " + "; ".join(f"{r.reason}: {r.detail}" for r in rej.items))
    return rules
