"""The default fault tables: generated from MindCluster's release files, complete, and read as MindCluster does.

The codes in the tables below were looked up by hand in MindCluster's files at commit 22bb3d98
(component/ascend-device-plugin/build/faultCode.json, SwitchFaultCode.json, faultCustomization.json,
component/noded/build/NodeDConfiguration.json, component/clusterd/build/publicFaultConfiguration.json).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from support import factories

from agent.core.detect.deviceinfo import DeviceInfoDetector
from agent.core.detect.levels import load_shipped_table, parse_fault_config
from agent.core.faults import FaultKind, FaultLevel
from testbed.tools import gen_fault_tables as gen

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "agent" / "core" / "detect" / "data"
TABLE = load_shipped_table()
GIT_DIR = os.environ.get("MINDCLUSTER_GIT_DIR", gen.DEFAULT_GIT_DIR)


def test_generated_tables_are_up_to_date(tmp_path: Path) -> None:
    """Running the generator on the commit the files name gives the shipped files byte for byte (and the operators'
    copy in config/ is the same chip table). Needs the MindCluster mirror (MINDCLUSTER_GIT_DIR)."""
    assert Path(GIT_DIR).is_dir(), f"the MindCluster git mirror {GIT_DIR} is needed (set MINDCLUSTER_GIT_DIR)"
    commit = yaml.safe_load((DATA / "fault_levels.yaml").read_text())["source"][0]["commit"]
    assert commit == gen.DEFAULT_COMMIT
    assert gen.main(["--git-dir", GIT_DIR, "--commit", commit, "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(gen.render(gen.read_sources(GIT_DIR, commit)))
    for name in names:
        assert (DATA / name).read_text() == (tmp_path / name).read_text(), f"{name} is stale: run make fault-tables"
    assert (ROOT / "config" / "fault_levels.yaml").read_text() == (tmp_path / "fault_levels.yaml").read_text()


@pytest.mark.parametrize("name", ["fault_levels.yaml", "switch_fault_levels.yaml", "noded_fault_levels.yaml",
                                  "public_fault_levels.yaml", "fault_customization.yaml"])  # fmt: skip
def test_each_generated_file_names_its_source_and_commit(name: str) -> None:
    doc = yaml.safe_load((DATA / name).read_text())
    assert doc["source"], name
    for src in doc["source"]:
        assert src["repository"] == "Ascend/mind-cluster"
        assert src["path"] in gen.SOURCES
        assert len(src["commit"]) == 40
        assert len(src["sha256"]) == 64


def test_tables_are_complete() -> None:
    """MindCluster's counts at 22bb3d98: 802 distinct chip codes, 30 switch, 59 NodeD, 30 public codes."""
    assert len(TABLE.shipped) == 802
    assert len(TABLE.switch) == 30
    assert len(TABLE.noded) == 59
    assert len(TABLE.public) == 30
    assert sum(1 for lvl in TABLE.shipped.values() if lvl is FaultLevel.PRE_SEPARATE) == 200


@pytest.mark.parametrize(
    ("code", "level"),
    [
        pytest.param("80E21007", FaultLevel.NOT_HANDLE, id="not-handle-first"),
        pytest.param("81078607", FaultLevel.NOT_HANDLE, id="not-handle-last"),
        pytest.param("80C98008", FaultLevel.RESTART_REQUEST, id="restart-request"),
        pytest.param("8107800D", FaultLevel.RESTART_REQUEST, id="restart-request-last"),
        pytest.param("8C204E00", FaultLevel.RESTART_BUSINESS, id="restart-business"),
        pytest.param("81B38002", FaultLevel.RESTART_BUSINESS, id="restart-business-last"),
        pytest.param("8C0E4E00", FaultLevel.FREE_RESTART_NPU, id="free-restart"),
        pytest.param("81CB8009", FaultLevel.FREE_RESTART_NPU, id="free-restart-last"),
        pytest.param("8C03A000", FaultLevel.RESTART_NPU, id="restart-npu"),
        pytest.param("81B78004", FaultLevel.RESTART_NPU, id="restart-npu-last"),
        pytest.param("80E3A201", FaultLevel.SEPARATE, id="separate"),
        pytest.param("8F19800C", FaultLevel.SEPARATE, id="separate-last"),
        pytest.param("110001024", FaultLevel.PRE_SEPARATE, id="pre-separate-9-digit"),
        pytest.param("8118043C", FaultLevel.PRE_SEPARATE, id="pre-separate"),
        pytest.param("8F19A04E", FaultLevel.PRE_SEPARATE, id="pre-separate-last"),
        pytest.param("81A3880C", FaultLevel.SUB_HEALTH, id="sub-health"),
        pytest.param("020000002", FaultLevel.SUB_HEALTH, id="sub-health-9-digit"),
        # the three codes the hand-written table had at other levels
        pytest.param("816F8002", FaultLevel.RESTART_NPU, id="816F8002-was-separate"),
        pytest.param("81B38004", FaultLevel.RESTART_NPU, id="81B38004-was-restart-business"),
        pytest.param("81B38009", FaultLevel.RESTART_NPU, id="81B38009-was-restart-business"),
        # listed under RestartBusinessCodes and SeparateNPUCodes: the most severe wins, as in fault_code.go
        pytest.param("A2301001", FaultLevel.SEPARATE, id="listed-twice"),
    ],
)
def test_chip_code_levels(code: str, level: FaultLevel) -> None:
    assert TABLE.code_level(code) is level


@pytest.mark.parametrize(
    ("code", "level"),
    [
        pytest.param("81078603", FaultLevel.NOT_HANDLE, id="link-down-from-not-handle"),
        pytest.param("81078607", FaultLevel.NOT_HANDLE, id="uboe-port-down"),
        pytest.param("110001024", FaultLevel.PRE_SEPARATE, id="uboe-pre-separate"),
        pytest.param("110000002", FaultLevel.SUB_HEALTH, id="uboe-sub-health"),
    ],
)
def test_network_code_levels(code: str, level: FaultLevel) -> None:
    """The network lists are derived as the device plugin's loader does (network codes of the chip lists)."""
    assert TABLE.network[code] is level
    assert TABLE.resolve((code,), None, {}, "network") is level


@pytest.mark.parametrize(
    ("code", "level"),
    [
        pytest.param("[0x00f1fef5,155913,cpu,na]", FaultLevel.NOT_HANDLE, id="not-handle"),
        pytest.param("[0x00f103b6,155908,na,na]", FaultLevel.SUB_HEALTH, id="sub-health"),
        pytest.param("[0x00f1fef5,155914,npu,na]", FaultLevel.RESTART_REQUEST, id="restart-request"),
        pytest.param("[0x00f103b0,155907,na,na]", FaultLevel.SEPARATE, id="separate"),
        pytest.param("[0x00F103B0, 155907,na,na]", FaultLevel.SEPARATE, id="spelling-normalised"),
        pytest.param("[0x00ffffff,1,na,na]", None, id="unknown"),
    ],
)
def test_switch_code_levels(code: str, level: FaultLevel | None) -> None:
    assert TABLE.code_level(code, kind="switch") is level


@pytest.mark.parametrize(
    ("code", "level"),
    [
        pytest.param("0100000D", FaultLevel.NOT_HANDLE, id="not-handle"),
        pytest.param("0000001D", FaultLevel.PRE_SEPARATE, id="pre-separate"),
        pytest.param("62000006", FaultLevel.PRE_SEPARATE, id="pre-separate-last"),
        pytest.param("2C000031", FaultLevel.SEPARATE, id="separate"),
    ],
)
def test_noded_code_levels(code: str, level: FaultLevel) -> None:
    assert TABLE.code_level(code, kind="node") is level
    assert TABLE.resolve((code,), None, {}, "chip", "node") is level


@pytest.mark.parametrize(
    ("code", "level"),
    [
        pytest.param("200001006", FaultLevel.NOT_HANDLE, id="not-handle"),
        pytest.param("010001001", FaultLevel.SUB_HEALTH, id="sub-health"),
        pytest.param("110001022", FaultLevel.PRE_SEPARATE, id="pre-separate"),
        pytest.param("220001001", FaultLevel.SEPARATE, id="separate"),
        pytest.param("999999999", None, id="unknown"),
    ],
)
def test_public_code_levels(code: str, level: FaultLevel | None) -> None:
    assert TABLE.public_level(code) is level


def test_the_four_network_lists_are_accepted_and_apply_to_network_faults() -> None:
    """faultCode.json's network lists used to be rejected as unknown-list."""
    text = json.dumps(
        {
            "SeparateNPUCodes": ["80E3A201"],
            "NotHandleFaultNetworkCodes": ["81078607"],
            "PreSeparateNPUNetworkCodes": [],
            "SeparateNPUNetworkCodes": ["81078603"],
            "SubHealthFaultNetworkCodes": ["110000002"],
        }
    )
    cfg, rej = parse_fault_config({"faultCode.json": text})
    assert rej == []
    assert cfg is not None
    assert dict(cfg) == {"80E3A201": FaultLevel.SEPARATE}
    assert cfg.network == {
        "81078607": FaultLevel.NOT_HANDLE,
        "81078603": FaultLevel.SEPARATE,
        "110000002": FaultLevel.SUB_HEALTH,
    }
    table = TABLE.with_overrides(cfg)
    assert table.resolve(("81078603",), None, {}, "network") is FaultLevel.SEPARATE
    assert table.resolve(("81078603",), None, {}, "chip") is FaultLevel.NOT_HANDLE  # chip lists unchanged
    # a network element the plugin left without a level gets the network list's level
    el = {"fault_type": "CardNetworkUnhealthy", "npu_name": "Ascend910-1", "fault_code": "81078603"}
    info = {"DeviceList": {"huawei.com/Ascend910-Fault": json.dumps([el])}, "UpdateTime": 1767225603}
    cm = factories.configmap("mindx-dl-deviceinfo-n1", {"DeviceInfoCfg": json.dumps({"DeviceInfo": info})}, uid="u")
    res = DeviceInfoDetector(table).update(cm, datetime(2026, 1, 1, tzinfo=UTC))
    assert [(f.kind, f.level) for f in res.faults] == [(FaultKind.NETWORK, FaultLevel.SEPARATE)]


def test_switch_fault_config_key_is_read() -> None:
    cfg, rej = parse_fault_config(
        {"faultCode.json": "{}", "SwitchFaultCode.json": '{"SeparateFaultCodes":["[0x00f1fef5,155913,cpu,na]"]}'}
    )
    assert rej == []
    assert cfg is not None
    table = TABLE.with_overrides(cfg)
    assert table.code_level("[0x00f1fef5,155913,cpu,na]", kind="switch") is FaultLevel.SEPARATE
    _, rej = parse_fault_config({"faultCode.json": "{}", "SwitchFaultCode.json": '{"SeparateFaultCodes":["0x1"]}'})
    assert [r.reason for r in rej] == ["bad-code"]
