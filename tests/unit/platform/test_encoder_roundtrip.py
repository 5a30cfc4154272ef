"""Property: whatever the Go encoder (testbed/mcencode) writes, the agent reads back as the faults that were put in.

Random fault sets (chip and network faults at every chip level, ClusterD's PublicFault elements and healthy
NormalNPU/NormalNetwork ones, multi-code faults, A3 switch events at every switch level, NodeD devices at every
NodeD level) are encoded by Go into the device plugin's and NodeD's ConfigMaps, read by the agent's own detection
path (:func:`agent.platform.detect_cli.detect_objects`, what ``fault-agent detect`` runs), and compared with what
was requested. The same per-node ConfigMaps then go through the Go ClusterD aggregator (chunks forced small, so
entries spread over several ``cluster-info-device-<i>``) and must give the same faults from ``cluster-info-*``.
The expected faults are derived from the request here, not from any encoder or parser.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.core.faults import Fault
from agent.platform.detect_cli import detect_objects, display_kind
from agent.settings import Settings
from testbed.encoder import Encoder, shared

NOW = datetime(2026, 1, 1, 8, 0, 10, tzinfo=UTC)
WRITTEN_S = int(NOW.timestamp()) - 10

CHIP_LEVELS = [
    "NotHandleFault",
    "SubHealthFault",
    "RestartRequest",
    "RestartBusiness",
    "FreeRestartNPU",
    "RestartNPU",
    "PreSeparateNPU",
    "SeparateNPU",
    "ManuallySeparateNPU",
]
HEALTHY = {"CardUnhealthy": "NormalNPU", "PublicFault": "NormalNPU", "CardNetworkUnhealthy": "NormalNetwork"}
CHIP_CODES = ["80E3A201", "80E18402", "80E01801", "8C1F8609", "81078603", "4C1F8608", "ABCDEF01"]
PUBLIC_CODES = ["220001001", "110001002"]
SWITCH_CODES = ["[0x00f103b0,155907,na,na]", "[0x00f1ff09,155912,cpu,na]", "[0x08520003,155649,na,na]"]
# A switch event's level on the chip scale, and the device plugin's own order of switch levels: the most severe
# by that order sets NodeStatus, and an UnHealthy node (RestartRequest or Separate most severe) is taken out of
# service, which the agent reads as SeparateNPU (agent/core/detect/switchinfo.py).
SWITCH_READ = {
    "NotHandle": "NotHandleFault",
    "SubHealthFault": "SubHealthFault",
    "RestartRequest": "RestartRequest",
    "PreSeparate": "PreSeparateNPU",
    "Separate": "SeparateNPU",
}
SWITCH_ORDER = ["NotHandle", "SubHealthFault", "RestartRequest", "PreSeparate", "Separate"]
NODED_READ = {"NotHandleFault": "NotHandleFault", "PreSeparateFault": "PreSeparateNPU", "SeparateFault": "SeparateNPU"}
ORDER = ["NotHandleFault", *CHIP_LEVELS[1:]]


@dataclass(frozen=True)
class NodeCase:
    name: str
    chips: tuple[tuple[int, str, str, tuple[str, ...]], ...]  # (chip, fault_type, level, codes)
    switch: tuple[tuple[str, int, int, str], ...] | None  # (code, switch chip, port, level); None: not A3
    noded: tuple[tuple[str, str, tuple[str, ...]], ...]  # (device type, level, codes)


@st.composite
def chip_faults(draw: st.DrawFn) -> tuple[tuple[int, str, str, tuple[str, ...]], ...]:
    chips = draw(st.lists(st.integers(0, 7), unique=True, max_size=5))
    out = []
    for chip in chips:
        fault_type = draw(st.sampled_from(sorted(HEALTHY)))
        level = draw(st.sampled_from([*CHIP_LEVELS, HEALTHY[fault_type]]))
        pool = PUBLIC_CODES if fault_type == "PublicFault" else CHIP_CODES
        codes = tuple(draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True)))
        out.append((chip, fault_type, level, codes))
    return tuple(out)


switch_events = st.lists(
    st.tuples(
        st.sampled_from(SWITCH_CODES), st.integers(0, 3), st.integers(0, 47), st.sampled_from(sorted(SWITCH_READ))
    ),
    max_size=4,
    unique_by=lambda e: (e[0], e[1], e[2]),
).map(tuple)

noded_devs = st.lists(
    st.tuples(
        st.sampled_from(["CPU", "Memory", "Disk", "PSU"]),
        st.sampled_from(sorted(NODED_READ)),
        st.lists(
            st.sampled_from(["00000011", "00000012", "0100001D", "28000013"]), min_size=1, max_size=2, unique=True
        ).map(tuple),
    ),
    max_size=3,
    unique_by=lambda d: d[0],
).map(tuple)


@st.composite
def node_cases(draw: st.DrawFn) -> tuple[NodeCase, ...]:
    n = draw(st.integers(1, 4))
    return tuple(
        NodeCase(f"rt-node-{i}", draw(chip_faults()), draw(st.none() | switch_events), draw(noded_devs))
        for i in range(n)
    )


def _requests(case: NodeCase) -> tuple[dict[str, object], dict[str, object] | None]:
    device: dict[str, object] = {
        "node": case.name,
        "update_time": WRITTEN_S,
        "faults": [{"chip": c, "codes": list(codes), "level": lv, "fault_type": ft} for c, ft, lv, codes in case.chips],
    }
    if case.switch is not None:
        device["switch"] = {
            "enabled": True,
            "events": [{"code": code, "switch_chip": sc, "port": p, "level": lv} for code, sc, p, lv in case.switch],
        }
    node = None
    if case.noded:
        devs = [
            {"device_type": t, "device_id": i, "codes": list(c), "level": lv} for i, (t, lv, c) in enumerate(case.noded)
        ]
        node = {"node": case.name, "update_time": WRITTEN_S, "devs": devs}
    return device, node


Key = tuple[str, str, str, tuple[str, ...], tuple[str, ...], str]


def expected(cases: tuple[NodeCase, ...]) -> list[Key]:
    """(kind, level, node, chips, codes, reason) of every fault the requests describe."""
    out: list[Key] = []
    for case in cases:
        for chip, fault_type, level, codes in case.chips:
            if level in ("NormalNPU", "NormalNetwork"):
                continue
            kind = {"CardUnhealthy": "chip", "CardNetworkUnhealthy": "network", "PublicFault": "public"}[fault_type]
            out.append((kind, level, case.name, (f"Ascend910-{chip}",), tuple(sorted(codes)), fault_type))
        if case.switch:
            levels = [SWITCH_READ[e[3]] for e in case.switch]
            if max((e[3] for e in case.switch), key=SWITCH_ORDER.index) in ("RestartRequest", "Separate"):
                levels.append("SeparateNPU")  # NodeStatus UnHealthy
            level = max(levels, key=ORDER.index)
            out.append(("switch", level, case.name, (), tuple(sorted({e[0] for e in case.switch})), "SwitchFault"))
        for dev_type, level, codes in case.noded:
            out.append(("node", NODED_READ[level], case.name, (), tuple(sorted(codes)), f"NodeD-{dev_type}"))
    return sorted(out)


def _keys(faults: list[Fault]) -> list[Key]:
    return sorted(
        (display_kind(f), f.level.wire_name, f.node, f.chips, tuple(sorted(f.codes)), f.reason) for f in faults
    )


def _per_node(cases: tuple[NodeCase, ...]) -> Iterator[dict[str, object]]:
    enc = shared()
    for case in cases:
        device, node = _requests(case)
        yield enc.device_cm(device)
        if node is not None:
            yield enc.node_cm(node)


_AGGREGATOR: list[Encoder] = []


def _aggregator() -> Encoder:
    """One encoder process for the ClusterD state of the round-trip examples (reset per example)."""
    if not _AGGREGATOR:
        _AGGREGATOR.append(Encoder(shared().binary))
    return _AGGREGATOR[0]


ROUNDTRIP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@ROUNDTRIP
@given(cases=node_cases(), max_chunk=st.sampled_from([1500, 4000, 800 * 1024]))
def test_go_encoded_configmaps_parse_back_to_the_faults_put_in(cases: tuple[NodeCase, ...], max_chunk: int) -> None:
    per_node = list(_per_node(cases))
    want = expected(cases)

    got = detect_objects(per_node, NOW)
    assert got.rejections == []
    assert _keys(got.faults) == want
    # the device plugin's and NodeD's CheckCodes (Go's sha256 of Go's json.Marshal) verify in the agent
    assert all(f.check_code_ok for f in got.faults if f.reason != "SwitchFault")

    aggregator = _aggregator()
    assert aggregator.request("clusterd-reset") is True  # a fresh ClusterD per example
    for cm in per_node:
        assert aggregator.request("clusterd-put", configmap=cm) is True
    # a pod holds every chip of every node: ClusterD's pre-separate rules then report a PreSeparate node or
    # switch as Healthy and change no fault (tests/unit/testbed/test_clusterd_preseparate.py covers the unused case)
    used = {case.name: [f"Ascend910-{i}" for i in range(8)] for case in cases}
    assert aggregator.request("clusterd-used", used=used) is True
    report = aggregator.request("clusterd-report", namespace="mindx-dl", max_chunk_bytes=max_chunk)
    via_clusterd = detect_objects(report, NOW, settings=Settings.model_validate({"kube": {"fault_source": "clusterd"}}))
    assert via_clusterd.rejections == []
    assert _keys(via_clusterd.faults) == want
    assert {f.source.name.rsplit("-", 1)[0] for f in via_clusterd.faults} <= {
        "cluster-info-device",
        "cluster-info-switch",
        "cluster-info-node",
    }


def test_clusterd_splits_the_device_view_into_chunks_and_empties_the_ones_no_longer_needed() -> None:
    """800 KiB chunks (report.go): shrink the aggregate and the spare ConfigMaps hold "" (all healthy)."""
    enc, aggregator = shared(), Encoder(shared().binary)
    try:
        cms = enc.device_cms([{"node": f"chunk-node-{i}", "update_time": WRITTEN_S} for i in range(3)])
        for cm in cms:
            aggregator.request("clusterd-put", configmap=cm)
        whole = aggregator.request("clusterd-report", max_chunk_bytes=1 << 20)
        assert [cm["metadata"]["name"] for cm in whole] == ["cluster-info-node-cm", "cluster-info-device-0"]
        entry = (len(whole[1]["data"]["cluster-info-device-0"]) - 4) // 3  # {"a":…,"b":…,"c":…}: equal sizes
        limit = entry + 2  # room for exactly one entry per chunk
        first = aggregator.request("clusterd-report", max_chunk_bytes=limit)
        names = [cm["metadata"]["name"] for cm in first]
        assert names == [
            "cluster-info-node-cm",
            "cluster-info-device-0",
            "cluster-info-device-1",
            "cluster-info-device-2",
        ]
        assert [len(cm["data"][cm["metadata"]["name"]]) for cm in first[1:]] == [limit] * 3
        for cm in cms[1:]:
            assert aggregator.request("clusterd-delete", configmap=cm) is True
        second = aggregator.request("clusterd-report", max_chunk_bytes=limit)
        assert [cm["data"][cm["metadata"]["name"]] == "" for cm in second] == [True, False, True, True]
    finally:
        aggregator.close()


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        pytest.param(
            lambda d: d.replace('"CheckCode":"', '"CheckCode":"0'), "CheckCode does not match", id="check-code"
        ),
        pytest.param(lambda d: d[:-2], "DeviceInfoCfg", id="truncated"),
    ],
)
def test_clusterd_refuses_what_clusterd_refuses(mutate: object, fragment: str) -> None:
    """ClusterD verifies each device ConfigMap before aggregating it (device_util.go ParseDeviceInfoCM)."""
    cm = shared().device_cm({"node": "bad-node", "update_time": WRITTEN_S})
    cm["data"]["DeviceInfoCfg"] = mutate(cm["data"]["DeviceInfoCfg"])  # type: ignore[operator]
    aggregator = Encoder(shared().binary)
    try:
        with pytest.raises(ValueError, match=fragment):
            aggregator.request("clusterd-put", configmap=cm)
        assert [cm["data"][cm["metadata"]["name"]] for cm in aggregator.request("clusterd-report")] == [""]
    finally:
        aggregator.close()
