"""Property tests: random and mutated ConfigMaps never make a detector raise; output stays well-formed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import factories

from agent.core.detect.common import DetectResult
from agent.core.detect.deviceinfo import DeviceInfoDetector
from agent.core.detect.levels import load_shipped_table, parse_fault_config
from agent.core.detect.nodeinfo import NodeInfoDetector
from agent.core.faults import Fault

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"
NOW = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
TABLE = load_shipped_table()
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DEVICE_TEXTS = [json.loads(p.read_text())["data"]["DeviceInfoCfg"] for p in sorted(FIXTURES.glob("deviceinfo-*.json"))]
NODED_TEXTS = [json.loads(p.read_text())["data"]["NodeInfo"] for p in sorted(FIXTURES.glob("nodeinfo-*.json"))]

json_scalars = st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


@st.composite
def mutated_text(draw: st.DrawFn, texts: list[str]) -> str:
    """A fixture's JSON with a few random edits: truncation, deletion, insertion, replacement."""
    text = draw(st.sampled_from(texts))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["truncate", "delete", "insert", "replace"]))
        i = draw(st.integers(0, max(0, len(text) - 1)))
        if op == "truncate":
            text = text[:i]
        elif op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 8)) :]
        elif op == "insert":
            text = text[:i] + draw(st.text(max_size=6)) + text[i:]
        else:
            text = text[:i] + draw(st.sampled_from(['"', "{", "]", ",", ":", "0", "-", "\\", "x"])) + text[i + 1 :]
    return text


def _replace_random_node(draw: st.DrawFn, doc: Any) -> Any:
    """Replace one random node of the parsed JSON tree with a random JSON value."""
    if isinstance(doc, dict) and doc and draw(st.booleans()):
        k = draw(st.sampled_from(sorted(doc)))
        return {**doc, k: _replace_random_node(draw, doc[k])}
    if isinstance(doc, list) and doc and draw(st.booleans()):
        i = draw(st.integers(0, len(doc) - 1))
        return [*doc[:i], _replace_random_node(draw, doc[i]), *doc[i + 1 :]]
    if isinstance(doc, str) and doc.startswith("[") and draw(st.booleans()):
        try:
            inner = json.loads(doc)
        except ValueError:
            return draw(json_values)
        return json.dumps(_replace_random_node(draw, inner))
    return draw(json_values)


@st.composite
def tree_mutated(draw: st.DrawFn, texts: list[str]) -> str:
    doc = json.loads(draw(st.sampled_from(texts)))
    for _ in range(draw(st.integers(1, 3))):
        doc = _replace_random_node(draw, doc)
    return json.dumps(doc)


def _check(res: DetectResult, name: str) -> None:
    assert all(isinstance(f, Fault) and f.node for f in res.faults)
    assert all(r.reason and r.source.name == name for r in res.rejections)


data_values = st.text(max_size=200) | json_values.map(json.dumps)
device_inputs = mutated_text(DEVICE_TEXTS) | tree_mutated(DEVICE_TEXTS) | data_values
noded_inputs = mutated_text(NODED_TEXTS) | tree_mutated(NODED_TEXTS) | data_values


@SETTINGS
@given(
    cfgs=st.lists(device_inputs, min_size=1, max_size=3),
    manual=st.none() | st.text(max_size=40),
    switch=st.none() | data_values,
)
def test_device_detector_never_raises(cfgs: list[str], manual: str | None, switch: str | None) -> None:
    det = DeviceInfoDetector(TABLE)
    name = "mindx-dl-deviceinfo-w1"
    for cfg in cfgs:
        data = {"DeviceInfoCfg": cfg}
        if manual is not None:
            data["ManuallySeparateNPU"] = manual
        if switch is not None:
            data["SwitchInfoCfg"] = switch
        _check(det.update(factories.configmap(name, data, uid="u"), NOW), name)
    _check(det.set_table(TABLE.with_overrides({"80E01801": TABLE.unknown["chip"]}), NOW), name)
    _check(det.delete("kube-system", name, NOW), name)


@SETTINGS
@given(data=st.dictionaries(st.text(max_size=20), st.text(max_size=50), max_size=5), name=st.text(max_size=40))
def test_device_detector_random_configmap(data: dict[str, str], name: str) -> None:
    det = DeviceInfoDetector(TABLE)
    _check(det.update(factories.configmap(name, data, uid="u"), NOW), name)


@SETTINGS
@given(values=st.lists(noded_inputs, min_size=1, max_size=3), update=st.text(max_size=30))
def test_noded_detector_never_raises(values: list[str], update: str) -> None:
    det = NodeInfoDetector(TABLE)
    name = "mindx-dl-nodeinfo-w1"
    for v in values:
        _check(
            det.update(
                factories.configmap(name, {"NodeInfo": v, "updateTime": update}, namespace="mindx-dl", uid="u"), NOW
            ),
            name,
        )
    _check(det.delete("mindx-dl", name, NOW), name)


@SETTINGS
@given(
    value=data_values
    | mutated_text([json.loads((FIXTURES / "fault-config-cm.json").read_text())["data"]["faultCode.json"]])
)
def test_fault_config_never_raises(value: str) -> None:
    overrides, rej = parse_fault_config({"faultCode.json": value})
    assert overrides is not None or rej
