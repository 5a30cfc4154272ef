"""Generate the agent's default fault tables from MindCluster's release files (``make fault-tables``).

Reads, from a git mirror of Ascend/mind-cluster at one commit (``git show <commit>:<path>``):

| output (agent/core/detect/data/)  | MindCluster source                                              |
|------------------------------|-----------------------------------------------------------------|
| ``fault_levels.yaml``        | component/ascend-device-plugin/build/faultCode.json (chip lists) |
|                              | + the network lists, derived as the device plugin's loader does  |
|                              | (component/ascend-device-plugin/pkg/common/fault_code.go)        |
| ``switch_fault_levels.yaml`` | component/ascend-device-plugin/build/SwitchFaultCode.json        |
| ``noded_fault_levels.yaml``  | component/noded/build/NodeDConfiguration.json (``FaultTypeCode``) |
| ``public_fault_levels.yaml`` | component/clusterd/build/publicFaultConfiguration.json           |
| ``fault_customization.yaml`` | component/ascend-device-plugin/build/faultCustomization.json     |

and writes ``config/fault_levels.yaml``, the operators' copy of the chip table. Each output names its source
path, the commit and the source's SHA-256. The lists keep MindCluster's names, order and codes (upper-cased hex;
switch codes as written); nothing is merged or re-levelled here: a code listed twice stays listed twice and the
agent's loader takes the most severe level, as the device plugin does.

Usage: ``python -m testbed.tools.gen_fault_tables [--git-dir DIR] [--commit REV] [--out DIR]``. ``--out`` writes
every file into one directory (the up-to-date test compares that with the shipped files). Exit 2 when the mirror
or a source file cannot be read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPOSITORY = "Ascend/mind-cluster"
DEFAULT_GIT_DIR = "/work/.mirror/Ascend+mind-cluster/repo"
DEFAULT_COMMIT = "22bb3d987bc0208c3eb7395e222b661276133c58"
"""The MindCluster commit the shipped tables come from (shared/DOMAIN.md: 22bb3d98, 2026-08-21)."""

CHIP_SOURCE = "component/ascend-device-plugin/build/faultCode.json"
NETWORK_RULES_SOURCE = "component/ascend-device-plugin/pkg/common/fault_code.go"
SWITCH_SOURCE = "component/ascend-device-plugin/build/SwitchFaultCode.json"
NODED_SOURCE = "component/noded/build/NodeDConfiguration.json"
PUBLIC_SOURCE = "component/clusterd/build/publicFaultConfiguration.json"
CUSTOMIZATION_SOURCE = "component/ascend-device-plugin/build/faultCustomization.json"
SOURCES = (CHIP_SOURCE, NETWORK_RULES_SOURCE, SWITCH_SOURCE, NODED_SOURCE, PUBLIC_SOURCE, CUSTOMIZATION_SOURCE)

CHIP_LISTS = (
    "NotHandleFaultCodes",
    "RestartRequestCodes",
    "RestartBusinessCodes",
    "FreeRestartNPUCodes",
    "RestartNPUCodes",
    "SeparateNPUCodes",
    "PreSeparateNPUCodes",
    "SubHealthFaultCodes",
)
NETWORK_LISTS = (
    "NotHandleFaultNetworkCodes",
    "PreSeparateNPUNetworkCodes",
    "SeparateNPUNetworkCodes",
    "SubHealthFaultNetworkCodes",
)
# The device plugin's loader (fault_code.go LoadFaultCode) copies each network code (NetworkFaultCodes) listed
# in a chip list into a network list: NotHandle/PreSeparateNPU/SeparateNPU/SubHealth to the network list of the
# same level, and RestartRequest/RestartBusiness/RestartNPU/FreeRestartNPU (levels a network fault cannot have)
# to NotHandleFaultNetworkCodes.
NETWORK_MAPPING = {
    "NotHandleFaultCodes": "NotHandleFaultNetworkCodes",
    "PreSeparateNPUCodes": "PreSeparateNPUNetworkCodes",
    "SeparateNPUCodes": "SeparateNPUNetworkCodes",
    "SubHealthFaultCodes": "SubHealthFaultNetworkCodes",
    "RestartRequestCodes": "NotHandleFaultNetworkCodes",
    "RestartBusinessCodes": "NotHandleFaultNetworkCodes",
    "RestartNPUCodes": "NotHandleFaultNetworkCodes",
    "FreeRestartNPUCodes": "NotHandleFaultNetworkCodes",
}
SWITCH_LISTS = (
    "NotHandleFaultCodes",
    "SubHealthFaultCodes",
    "RestartRequestFaultCodes",
    "PreSeparateFaultCodes",
    "ResetFaultCodes",
    "SeparateFaultCodes",
)
NODED_LISTS = ("NotHandleFaultCodes", "PreSeparateFaultCodes", "SeparateFaultCodes")
PUBLIC_LISTS = ("NotHandleFaultCodes", "SubHealthFaultCodes", "PreSeparateNPUCodes", "SeparateNPUCodes")

WIDTH = 116


class SourceError(Exception):
    """The mirror or one of its files could not be read or does not have the expected shape."""


@dataclass(frozen=True, slots=True)
class Source:
    """One MindCluster file as read: its path, the commit and its text."""

    path: str
    commit: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def read_sources(git_dir: str, commit: str) -> dict[str, Source]:
    """Every file of :data:`SOURCES` at `commit` (resolved to its full hash) from the git mirror `git_dir`.

    Raises:
        SourceError: git fails (no mirror, unknown commit, missing file).
    """

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True, check=False, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SourceError(f"git {' '.join(args)}: {e}") from e
        if done.returncode != 0:
            raise SourceError(f"git --git-dir={git_dir} {' '.join(args)}: {done.stderr.strip()[:300]}")
        return done.stdout

    full = git("rev-parse", "--verify", f"{commit}^{{commit}}").strip()
    return {path: Source(path, full, git("show", f"{full}:{path}")) for path in SOURCES}


def _json(src: Source) -> Any:
    try:
        return json.loads(src.text)
    except ValueError as e:
        raise SourceError(f"{src.path}: not JSON: {e}") from e


def _codes(obj: Mapping[str, Any], key: str, what: str, *, upper: bool = True) -> list[str]:
    """The list `key` of `obj` (absent: empty), each code stripped (and upper-cased), duplicates dropped."""
    value = obj.get(key, [])
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise SourceError(f"{what}.{key}: expected a list of strings")
    out: list[str] = []
    for code in value:
        c = code.strip().upper() if upper else code.strip()
        if c not in out:
            out.append(c)
    return out


def network_codes(go_source: str) -> list[str]:
    """The device plugin's ``NetworkFaultCodes`` (fault_code.go): the constants named in its ``sets.NewInt64``,
    as upper-case hex without ``0x``.

    Raises:
        SourceError: the set or one of its constants is not found.
    """
    m = re.search(r"NetworkFaultCodes\s*=\s*sets\.NewInt64\(([^)]*)\)", go_source)
    if m is None:
        raise SourceError(f"{NETWORK_RULES_SOURCE}: NetworkFaultCodes not found")
    out = []
    for name in (n.strip() for n in m.group(1).split(",") if n.strip()):
        c = re.search(rf"\b{re.escape(name)}\s+int64\s*=\s*0x([0-9A-Fa-f]+)", go_source)
        if c is None:
            raise SourceError(f"{NETWORK_RULES_SOURCE}: constant {name} not found")
        out.append(c.group(1).upper())
    return out


def _flow(name: str, codes: Sequence[str]) -> list[str]:
    """``name: [ "a", "b", … ]`` wrapped at :data:`WIDTH` columns (YAML flow sequence)."""
    if not codes:
        return [f"{name}: []"]
    lines = [f"{name}: ["]
    line = " "
    for code in codes:
        item = f' "{code}",'
        if len(line) + len(item) > WIDTH:
            lines.append(line)
            line = " "
        line += item
    lines.append(line)
    lines.append("]")
    return lines


def _header(title: str, sources: Iterable[Source], notes: Sequence[str]) -> list[str]:
    srcs = list(sources)
    out = [
        f"# {title}",
        "#",
        "# GENERATED by testbed/tools/gen_fault_tables.py (`make fault-tables`) from MindCluster's release files;",
        "# do not edit by hand (a unit test regenerates it and compares).",
    ]
    for s in srcs:
        out.append(f"# Source: {REPOSITORY} {s.path}")
        out.append(f"#   at commit {s.commit}, sha256 {s.sha256}")
    out += ["#", *(f"# {n}" if n else "#" for n in notes), "version: 1", "source:"]
    for s in srcs:
        out += [f"  - repository: {REPOSITORY}", f"    path: {s.path}", f"    commit: {s.commit}"]
        out.append(f"    sha256: {s.sha256}")
    return out


def chip_table(src: Source, rules: Source) -> str:
    """``fault_levels.yaml``: the eight chip lists of faultCode.json plus the four network lists."""
    doc = _json(src)
    if not isinstance(doc, dict):
        raise SourceError(f"{src.path}: expected an object")
    unknown = sorted(set(doc) - set(CHIP_LISTS) - set(NETWORK_LISTS))
    if unknown:
        raise SourceError(f"{src.path}: lists this generator does not know: {unknown}")
    lists = {name: _codes(doc, name, src.path) for name in CHIP_LISTS}
    network = {name: _codes(doc, name, src.path) for name in NETWORK_LISTS}
    net_codes = set(network_codes(rules.text))
    for chip_list, net_list in NETWORK_MAPPING.items():
        for code in lists[chip_list]:
            if code in net_codes and code not in network[net_list]:
                network[net_list].append(code)
    total = len({c for codes in lists.values() for c in codes})
    notes = [
        "Chip fault levels (the eight lists of the device plugin's faultCode.json, same names and order) and",
        "parameter-plane network fault levels (the four network lists: faultCode.json's own, here empty, plus each",
        f"network code ({', '.join(sorted(net_codes))}) of a chip list, mapped as the device plugin's loader does).",
        f"{total} distinct chip codes. A code listed under several levels takes the most severe one.",
        "",
        "How the agent uses it (agent/core/detect/levels.py): a level the reporter wrote is final; this table, and the",
        "`mindx-dl-fault-config` ConfigMap's `faultCode.json` over it code by code, only fill in a level that is",
        "missing or unknown. The agent reads its packaged copy (agent/core/detect/data/fault_levels.yaml);",
        "config/fault_levels.yaml is the same file for operators.",
    ]
    out = _header("Fault levels of NPU chip and network fault codes, shipped with fault-agent.", [src, rules], notes)
    out += [
        "",
        "# Level of a code found in no list (fault_code.go: an unknown chip code is SeparateNPU, an unknown network",
        "# code PreSeparateNPU; an A3 switch code the switch table does not list counts as PreSeparateNPU).",
        "unknown:",
        "  chip: SeparateNPU",
        "  network: PreSeparateNPU",
        "  switch: PreSeparateNPU",
        "",
    ]
    for name in CHIP_LISTS:
        out += _flow(name, lists[name])
    out.append("")
    for name in NETWORK_LISTS:
        out += _flow(name, network[name])
    return "\n".join(out) + "\n"


def _simple_table(src: Source, title: str, lists_names: Sequence[str], obj: Any, notes: list[str], upper: bool) -> str:
    if not isinstance(obj, dict):
        raise SourceError(f"{src.path}: expected an object")
    unknown = sorted(set(obj) - set(lists_names))
    if unknown:
        raise SourceError(f"{src.path}: lists this generator does not know: {unknown}")
    lists = {name: _codes(obj, name, src.path, upper=upper) for name in lists_names}
    total = len({c for codes in lists.values() for c in codes})
    out = _header(title, [src], [*notes, f"{total} distinct codes."])
    out.append("")
    for name in lists_names:
        out += _flow(name, lists[name])
    return "\n".join(out) + "\n"


def switch_table(src: Source) -> str:
    """``switch_fault_levels.yaml``: the A3 switch (UnifiedBus) code lists of SwitchFaultCode.json."""
    notes = [
        "Levels of A3 switch fault codes (`AssembledFaultCode` of a SwitchInfoCfg event, kept as written), in the",
        "switch vocabulary: NotHandle < SubHealthFault < RestartRequest < PreSeparate < Separate. ResetFaultCodes",
        "count as Separate (the device plugin's LoadSwitchFaultCode). The agent maps them onto the chip scale",
        "(agent/core/detect/switchinfo.py) and uses the table only for an event the plugin gave no level.",
    ]
    return _simple_table(src, "Fault levels of A3 switch fault codes.", SWITCH_LISTS, _json(src), notes, False)


def noded_table(src: Source) -> str:
    """``noded_fault_levels.yaml``: NodeD's ``FaultTypeCode`` lists (NodeDConfiguration.json)."""
    doc = _json(src)
    if not isinstance(doc, dict) or not isinstance(doc.get("FaultTypeCode"), dict):
        raise SourceError(f"{src.path}: FaultTypeCode missing")
    notes = [
        "Levels of NodeD's node hardware fault codes (FaultTypeCode of NodeDConfiguration.json). NodeD writes a",
        "FaultLevel for each device itself; the agent uses this table only for a device whose level is missing or",
        "unknown.",
    ]
    return _simple_table(src, "Fault levels of NodeD node fault codes.", NODED_LISTS, doc["FaultTypeCode"], notes, True)


def public_table(src: Source) -> str:
    """``public_fault_levels.yaml``: ClusterD's public-fault codes (``publicFaultCode``) and resources."""
    doc = _json(src)
    if not isinstance(doc, dict) or not isinstance(doc.get("publicFaultCode"), dict):
        raise SourceError(f"{src.path}: publicFaultCode missing")
    notes = [
        "Levels of public-fault codes (9 characters) that monitors report in `mc-consumer-publicfault`",
        "ConfigMaps (ClusterD's publicFaultConfiguration.json `publicFaultCode`).",
    ]
    text = _simple_table(src, "Fault levels of public-fault codes.", PUBLIC_LISTS, doc["publicFaultCode"], notes, True)
    resources = _codes(doc, "publicFaultResource", src.path, upper=False)
    return text + "\n".join(["", *_flow("publicFaultResource", resources)]) + "\n"


def customization_table(src: Source) -> str:
    """``fault_customization.yaml``: the ``FaultFrequency`` and ``FaultDuration`` rules of faultCustomization.json,
    in MindCluster's own field names (so the agent's parser reads this file and the ConfigMap key alike)."""
    doc = _json(src)
    if not isinstance(doc, dict):
        raise SourceError(f"{src.path}: expected an object")
    notes = [
        "Per-code flapping rules (the device plugin's faultCustomization.json, same field names and units):",
        "- FaultFrequency: a chip that reports one of `EventId` `Times` times within `TimeWindow` seconds gets",
        "  level `FaultHandling` (ManuallySeparateNPU: the chip is isolated); `ReleaseTimeWindow` (s, optional)",
        "  lifts it after the chip has been free of the code that long.",
        "- FaultDuration: a fault with one of `EventId` active longer than `FaultTimeout` seconds gets",
        "  `FaultHandling`, until it has been gone `RecoverTimeout` seconds.",
        "GraceTolerance (the plugin's own reset timings) is not used by the agent and not copied.",
        "The `faultCustomization.json` key of the `mindx-dl-fault-config` ConfigMap replaces these rules.",
    ]
    out = _header("Fault frequency and duration rules (MindCluster's defaults).", [src], notes)
    for section, fields in (
        ("FaultFrequency", ("TimeWindow", "Times", "FaultHandling", "ReleaseTimeWindow")),
        ("FaultDuration", ("FaultTimeout", "RecoverTimeout", "FaultHandling")),
    ):
        rules = doc.get(section, [])
        if not isinstance(rules, list):
            raise SourceError(f"{src.path}.{section}: expected a list")
        out.append(f"{section}:" if rules else f"{section}: []")
        for i, rule in enumerate(rules):
            if not isinstance(rule, dict):
                raise SourceError(f"{src.path}.{section}[{i}]: expected an object")
            codes = _codes(rule, "EventId", f"{src.path}.{section}[{i}]")
            first = True
            for line in _flow("EventId", codes):
                out.append(("  - " if first else "    ") + line)
                first = False
            for fld in fields:
                if fld in rule:
                    out.append(f"    {fld}: {json.dumps(rule[fld])}")
    return "\n".join(out) + "\n"


def render(sources: Mapping[str, Source]) -> dict[str, str]:
    """File name → content of every generated table (pure: the same sources give the same bytes)."""
    return {
        "fault_levels.yaml": chip_table(sources[CHIP_SOURCE], sources[NETWORK_RULES_SOURCE]),
        "switch_fault_levels.yaml": switch_table(sources[SWITCH_SOURCE]),
        "noded_fault_levels.yaml": noded_table(sources[NODED_SOURCE]),
        "public_fault_levels.yaml": public_table(sources[PUBLIC_SOURCE]),
        "fault_customization.yaml": customization_table(sources[CUSTOMIZATION_SOURCE]),
    }


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    p = argparse.ArgumentParser(prog="gen_fault_tables", description=__doc__.split("\n\n")[0] if __doc__ else "")
    p.add_argument("--git-dir", default=os.environ.get("MINDCLUSTER_GIT_DIR", DEFAULT_GIT_DIR))
    p.add_argument("--commit", default=DEFAULT_COMMIT)
    p.add_argument("--out", type=Path, help="write every file into this directory instead of the tree")
    args = p.parse_args(argv)
    try:
        files = render(read_sources(args.git_dir, args.commit))
    except SourceError as e:
        print(f"gen_fault_tables: {e}", file=sys.stderr)
        return 2
    targets: list[tuple[Path, str]] = []
    for name, text in files.items():
        if args.out is not None:
            targets.append((args.out / name, text))
        else:
            targets.append((root / "agent" / "core" / "detect" / "data" / name, text))
    if args.out is None:
        targets.append((root / "config" / "fault_levels.yaml", files["fault_levels.yaml"]))
    for path, text in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
