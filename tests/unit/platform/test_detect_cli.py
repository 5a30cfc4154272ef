"""`fault-agent detect -f FILE [--json]`: the agent's own detection path on ConfigMap files."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import factories

from agent.cli import main

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"
MC = FIXTURES / "mindcluster"
NOW = "2026-01-01T09:00:00Z"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["detect", "--now", NOW, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def as_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, _ = run(capsys, "--json", *args)
    assert code == 0
    assert out.count("\n") == 1  # exactly one JSON object
    doc: dict[str, Any] = json.loads(out)
    assert sorted(doc) == ["cleared", "faults", "rejections"]
    return doc


@pytest.fixture
def clusterd(monkeypatch: pytest.MonkeyPatch) -> None:
    """ClusterD's cluster-info-* are read only with kube.fault_source clusterd (or auto finding them), as by `run`."""
    monkeypatch.setenv("FAULT_AGENT_KUBE__FAULT_SOURCE", "clusterd")


@pytest.mark.usefixtures("clusterd")
def test_a_list_of_clusterd_configmaps(capsys: pytest.CaptureFixture[str]) -> None:
    doc = as_json(capsys, "-f", str(MC / "clusterd-list.json"))
    assert doc["rejections"] == []
    assert doc["cleared"] == []
    kinds = sorted((f["kind"], f["level"], f["node"], tuple(f["chips"]), tuple(f["codes"])) for f in doc["faults"])
    assert kinds == [
        ("chip", "SeparateNPU", "mc-node-0", ("Ascend910-3",), ("80E3A201",)),
        ("network", "PreSeparateNPU", "mc-node-0", ("Ascend910-1",), ("81078603",)),
        ("node", "SeparateFault", "mc-node-0", (), ("00000011",)),  # NodeD's name, ClusterD's node entry
        ("public", "SeparateNPU", "mc-node-0", ("Ascend910-5",), ("220001001",)),
        ("switch", "SeparateNPU", "mc-node-0", (), ("[0x00f103b0,155907,na,na]",)),
    ]
    assert {f["check_code_ok"] for f in doc["faults"]} == {None}  # ClusterD entries carry no CheckCode
    assert set(doc["faults"][0]) == {
        "kind", "level", "node", "chips", "codes", "reason", "check_code_ok", "detail", "devices"
    }  # fmt: skip


@pytest.mark.usefixtures("clusterd")
def test_a_second_version_of_a_configmap_is_an_update(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    docs = [json.loads((MC / n).read_text()) for n in ("clusterd-device-faults.json", "clusterd-device-empty.json")]
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    doc = as_json(capsys, "-f", str(path))
    assert len(doc["faults"]) == 3
    assert sorted(c["chips"][0] for c in doc["cleared"]) == ["Ascend910-1", "Ascend910-3", "Ascend910-5"]
    assert doc["rejections"] == []


def test_per_node_configmaps_report_their_check_code(capsys: pytest.CaptureFixture[str]) -> None:
    doc = as_json(capsys, "-f", str(FIXTURES / "deviceinfo-bad-checkcode.json"))
    (fault,) = doc["faults"]
    assert fault["check_code_ok"] is False
    assert [r["reason"] for r in doc["rejections"]] == ["bad-check-code"]
    assert doc["rejections"][0]["source"] == "kube-system/mindx-dl-deviceinfo-worker-04"
    doc = as_json(capsys, "-f", str(FIXTURES / "deviceinfo-chip-restartbusiness.json"))
    assert [f["check_code_ok"] for f in doc["faults"]] == [True]


def test_a_directory_and_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    doc = as_json(capsys, "-f", str(MC))
    assert any(f["kind"] == "switch" for f in doc["faults"])
    monkeypatch.setattr("sys.stdin", io.StringIO((MC / "deviceinfo-a3-switch-separate.json").read_text()))
    doc = as_json(capsys, "-f", "-")
    assert [(f["kind"], f["level"], f["check_code_ok"]) for f in doc["faults"]] == [("switch", "SeparateNPU", None)]


def _without_levels(path: Path) -> Path:
    """The device-plugin fixture with the levels of its -Fault elements removed (an older plugin's shape)."""
    doc = json.loads((FIXTURES / "deviceinfo-chip-restartbusiness.json").read_text())
    cfg = json.loads(doc["data"]["DeviceInfoCfg"])
    dl = cfg["DeviceInfo"]["DeviceList"]
    els = json.loads(dl["huawei.com/Ascend910-Fault"])
    for el in els:
        for key in ("large_model_fault_level", "fault_level", "fault_handling"):
            el.pop(key, None)
        el["fault_time_and_level_map"] = {
            c: {"fault_time": v["fault_time"]} for c, v in el["fault_time_and_level_map"].items()
        }
    dl["huawei.com/Ascend910-Fault"] = json.dumps(els)
    doc["data"]["DeviceInfoCfg"] = json.dumps(cfg)
    path.write_text(json.dumps(doc))
    return path


def test_fault_config_applies_a_level_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    table = tmp_path / "faultCode.json"
    table.write_text('{"SeparateNPUCodes": ["80E01801"]}')
    fixture = str(FIXTURES / "deviceinfo-chip-restartbusiness.json")
    unlevelled = str(_without_levels(tmp_path / "cm.json"))
    plain = as_json(capsys, "-f", unlevelled)
    assert [f["level"] for f in plain["faults"]] == ["RestartBusiness"]  # the shipped table's level
    doc = as_json(capsys, "-f", unlevelled, "--fault-config", str(table))
    assert [f["level"] for f in doc["faults"]] == ["SeparateNPU"]
    # the plugin wrote RestartBusiness: a level the reporter wrote is final
    doc = as_json(capsys, "-f", fixture, "--fault-config", str(table))
    assert [f["level"] for f in doc["faults"]] == ["RestartBusiness"]
    doc = as_json(capsys, "-f", fixture, "--fault-config", str(FIXTURES / "fault-config-cm.json"))
    assert len(doc["faults"]) == 1


@pytest.mark.usefixtures("clusterd")
def test_rejections_still_exit_zero(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    meta = {"name": "cluster-info-node-cm", "namespace": "mindx-dl", "labels": {"mx-consumer-volcano": "true"}}
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    bad["data"] = {"cluster-info-node-cm": '{"mindx-dl-nodeinfo-x": '}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "m"}}
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "m"}, "data": {}}
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [bad, pod, other]}))
    doc = as_json(capsys, "-f", str(path))
    assert [(r["source"], r["reason"]) for r in doc["rejections"]] == [
        ("mindx-dl/cluster-info-node-cm", "json-truncated"),
        ("m/p", "not-a-configmap"),
        ("m/cm", "unwatched"),
    ]


@pytest.mark.usefixtures("clusterd")
def test_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-f", str(MC / "clusterd-switch-separate.json"))
    assert code == 0
    assert "switch  SeparateNPU" in out
    assert "node=mc-node-0" in out
    assert out.splitlines()[-1] == "1 fault(s), 0 cleared, 0 rejection(s)"


@pytest.mark.parametrize("content", [pytest.param(None, id="missing"), pytest.param("key: [unclosed", id="not-yaml")])
def test_an_unreadable_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "in.yaml"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "-f", str(path))
    assert code == 2
    assert out == ""
    assert str(path) in err


def test_a_binary_file_is_not_utf8_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "in.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    code, out, err = run(capsys, "-f", str(path))
    assert code == 2
    assert out == ""
    assert f"{path}: not UTF-8 text (invalid start byte at byte 0)" in err


def test_a_directorys_unreadable_files_are_rejections_and_the_rest_is_detected(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good = MC / "clusterd-device-faults.json"
    (tmp_path / "a-binary.yaml").write_bytes(b"\xff\xfe\x00junk")
    (tmp_path / f"b-good{good.suffix}").write_bytes(good.read_bytes())
    (tmp_path / "c-broken.yaml").write_text("key: [unclosed")
    _, alone, _ = run(capsys, "--json", "-f", str(tmp_path / f"b-good{good.suffix}"))
    code, out, err = run(capsys, "--json", "-f", str(tmp_path))
    assert code == 2
    doc = json.loads(out)
    expected = json.loads(alone)
    assert expected["faults"] or expected["rejections"]  # the good file has something to report
    assert doc["faults"] == expected["faults"]
    bad = [r for r in doc["rejections"] if r["reason"] == "unreadable-file"]
    assert [r["source"] for r in bad] == [str(tmp_path / "a-binary.yaml"), str(tmp_path / "c-broken.yaml")]
    assert bad[0]["detail"].startswith("not UTF-8 text (")
    assert bad[1]["detail"].startswith("neither JSON nor YAML")
    assert [r for r in doc["rejections"] if r["reason"] != "unreadable-file"] == expected["rejections"]
    assert "2 file(s) could not be read" in err


def test_the_agents_settings_apply(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_AGENT_DETECT__CHECK_CODE_MISMATCH", "ignore")
    doc = as_json(capsys, "-f", str(FIXTURES / "deviceinfo-bad-checkcode.json"))
    assert doc["faults"] == []  # a torn ConfigMap is ignored, as the agent would with this setting
    assert [r["reason"] for r in doc["rejections"]] == ["bad-check-code"]
    monkeypatch.setenv("FAULT_AGENT_DETECT__CHECK_CODE_MISMATCH", "sometimes")
    code, out, err = run(capsys, "-f", str(FIXTURES / "deviceinfo-bad-checkcode.json"))
    assert (code, out) == (2, "")
    assert "FAULT_AGENT_DETECT__CHECK_CODE_MISMATCH" in err


@pytest.mark.parametrize(
    "content",
    [pytest.param("", id="empty"), pytest.param("apiVersion: v1\nkind: ConfigMapList\nitems: []\n", id="empty-list")],
)
def test_no_objects_at_all_is_not_a_healthy_cluster(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str
) -> None:
    """An empty pipe (a failed `kubectl get … |`) or an empty list exits 2 instead of reporting 0 faults."""
    path = tmp_path / "in.yaml"
    path.write_text(content)
    code, out, err = run(capsys, "-f", str(path))
    assert code == 2
    assert out == ""
    assert f"no objects in {path}" in err


def test_a_now_the_detectors_cannot_use_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A `--now` near the end of the calendar made a detector fail (an overflow) and the fault vanish, exit 0."""
    code = main(
        ["detect", "--now", "9999-12-31T23:59:59Z", "-f", str(FIXTURES / "deviceinfo-chip-restartbusiness.json")]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "is outside 2000-9000" in err


def test_a_detector_failure_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A detector that raises is logged by the pipeline; detect says the report may miss faults and exits 2."""
    from agent.core.detect import deviceinfo

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("planted")

    monkeypatch.setattr(deviceinfo.DeviceInfoDetector, "update", broken)
    code, out, err = run(capsys, "-f", str(FIXTURES / "deviceinfo-chip-restartbusiness.json"))
    assert code == 2
    assert "a detector failed" in err
    assert out.splitlines()[-1] == "0 fault(s), 0 cleared, 0 rejection(s)"  # the report, marked incomplete


SEPARATE = FIXTURES / "deviceinfo-chip-separate-multi-code.json"  # kube-system/mindx-dl-deviceinfo-worker-02


def _moved(tmp_path: Path, source: Path, namespace: str | None) -> str:
    """`source` (one ConfigMap) in `namespace` (None: without one, as a hand-written file may be)."""
    doc = json.loads(source.read_text())
    if namespace is None:
        del doc["metadata"]["namespace"]
    else:
        doc["metadata"]["namespace"] = namespace
    path = tmp_path / f"{source.stem}-{namespace}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _unwatched(doc: dict[str, Any]) -> list[tuple[str, str]]:
    assert doc["faults"] == []
    assert doc["cleared"] == []
    return [(r["source"], r["detail"]) for r in doc["rejections"] if r["reason"] == "unwatched"]


def test_a_device_info_configmap_outside_its_namespace_is_unwatched(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`run` watches mindx-dl-deviceinfo-* only in kube.device_info_namespace: one in `default` was reported as a
    SeparateNPU fault."""
    path = _moved(tmp_path, SEPARATE, "default")
    assert _unwatched(as_json(capsys, "-f", path)) == [
        (
            "default/mindx-dl-deviceinfo-worker-02",
            "run reads mindx-dl-deviceinfo-* only in kube.device_info_namespace=kube-system",
        )
    ]
    monkeypatch.setenv("FAULT_AGENT_KUBE__DEVICE_INFO_NAMESPACE", "default")
    doc = as_json(capsys, "-f", path)
    assert [(f["level"], f["node"]) for f in doc["faults"]] == [("SeparateNPU", "worker-02")]
    assert _unwatched(as_json(capsys, "-f", str(SEPARATE))) == [
        (
            "kube-system/mindx-dl-deviceinfo-worker-02",
            "run reads mindx-dl-deviceinfo-* only in kube.device_info_namespace=default",
        )
    ]


def test_a_disabled_source_is_unwatched(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-node ConfigMaps are not read with kube.fault_source clusterd (once: the setting changed nothing)."""
    monkeypatch.setenv("FAULT_AGENT_KUBE__FAULT_SOURCE", "clusterd")
    assert _unwatched(as_json(capsys, "-f", str(SEPARATE))) == [
        (
            "kube-system/mindx-dl-deviceinfo-worker-02",
            "kube.fault_source clusterd: run reads deviceinfo only with fault source per-node",
        )
    ]


def test_cluster_info_is_read_only_when_enabled(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One fault source (issue 36, item 7): cluster-info-* is read with kube.fault_source clusterd, or auto when the
    input holds one of ClusterD's ConfigMaps (as `run` finds them in the cluster), never with per-node."""
    switch = MC / "clusterd-switch-separate.json"
    assert [f["kind"] for f in as_json(capsys, "-f", str(switch))["faults"]] == ["switch"]  # auto finds it
    monkeypatch.setenv("FAULT_AGENT_KUBE__FAULT_SOURCE", "per-node")
    assert _unwatched(as_json(capsys, "-f", str(switch))) == [
        (
            "mindx-dl/cluster-info-switch-0",
            "kube.fault_source per-node: run reads clusterinfo only with fault source clusterd",
        )
    ]
    monkeypatch.setenv("FAULT_AGENT_KUBE__FAULT_SOURCE", "clusterd")
    assert [f["kind"] for f in as_json(capsys, "-f", str(switch))["faults"]] == ["switch"]
    doc = json.loads(switch.read_text())
    del doc["metadata"]["labels"]  # ClusterD's watch selects its consumer label
    unlabelled = tmp_path / "unlabelled.json"
    unlabelled.write_text(json.dumps(doc))
    assert _unwatched(as_json(capsys, "-f", str(unlabelled))) == [
        ("mindx-dl/cluster-info-switch-0", "run reads cluster-info-* only with label mx-consumer-volcano=true")
    ]
    monkeypatch.setenv("FAULT_AGENT_KUBE__NODE_INFO_NAMESPACE", "cluster-system")
    assert _unwatched(as_json(capsys, "-f", str(switch))) == [
        ("mindx-dl/cluster-info-switch-0", "run reads cluster-info-* only in kube.node_info_namespace=cluster-system")
    ]


def test_public_faults_outside_the_watched_namespaces_are_unwatched(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    public = str(MC / "testbed-publicfault-occur.json")  # mindx-dl/pingmesh-public-fault
    assert [f["kind"] for f in as_json(capsys, "-f", public)["faults"]] == ["public"]  # all namespaces by default
    monkeypatch.setenv("FAULT_AGENT_KUBE__PUBLIC_FAULT_NAMESPACES", '["a", "b"]')
    assert _unwatched(as_json(capsys, "-f", public)) == [
        (
            "mindx-dl/pingmesh-public-fault",
            "run reads ConfigMaps labelled mc-consumer-publicfault=true only in kube.public_fault_namespaces=a,b",
        )
    ]
    monkeypatch.setenv("FAULT_AGENT_KUBE__PUBLIC_FAULT_ENABLED", "false")
    assert _unwatched(as_json(capsys, "-f", public)) == [
        ("mindx-dl/pingmesh-public-fault", "kube.public_fault_enabled is false")
    ]


def test_a_configmap_without_a_namespace_is_in_the_watched_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = _moved(tmp_path, SEPARATE, None)
    for namespace in ("kube-system", "elsewhere"):
        monkeypatch.setenv("FAULT_AGENT_KUBE__DEVICE_INFO_NAMESPACE", namespace)
        doc = as_json(capsys, "-f", path)
        assert [(f["level"], f["node"]) for f in doc["faults"]] == [("SeparateNPU", "worker-02")]
        assert doc["rejections"] == []


@pytest.mark.parametrize(
    "kube",
    [
        pytest.param({}, id="defaults"),
        pytest.param({"fault_source": "clusterd"}, id="clusterd"),
        pytest.param(
            {
                "device_info_namespace": "d",
                "node_info_namespace": "n",
                "fault_config_namespace": "f",
                "public_fault_namespaces": ["p", "q"],
            },
            id="moved",
        ),
        pytest.param({"node_info_namespace": "n", "fault_source": "clusterd"}, id="moved-clusterd"),
    ],
)
def test_detect_reads_what_each_configmap_watch_of_run_selects(kube: dict[str, Any]) -> None:
    """Every ConfigMap watch `run` opens routes an object it selects to the watch's own source, and detect reads
    no source `run` does not watch."""
    from agent.platform.detect_cli import route
    from agent.settings import KubeSettings
    from agent.sources.watchers import CONFIGMAP_SOURCES, resources

    settings = KubeSettings(**kube)
    watched = set()
    for res in resources(settings):
        if res.kind != "ConfigMap":
            continue
        name = res.field_selector.removeprefix("metadata.name=") if res.field_selector else f"{res.name_prefix}x"
        labels = tuple(tuple(t.split("=", 1)) for t in res.label_selector.split(",") if t)
        rec = factories.configmap(name, (), namespace=res.namespace or "any", uid="u", labels=labels)
        assert route(rec, settings) == res.source
        watched.add(res.source)
    for cm in CONFIGMAP_SOURCES:
        if cm.source not in watched:
            name = cm.name or f"{cm.name_prefix}x"
            labels = tuple(tuple(t.split("=", 1)) for t in cm.label_selector.split(",") if t)
            rec = factories.configmap(name, {}, namespace="", uid="u", labels=labels)
            assert route(rec, settings) != cm.source


def test_a_node_list_from_kubectl_is_read_with_its_gpu_conditions(capsys: pytest.CaptureFixture[str]) -> None:
    """``kubectl get node -o json`` of a node NVSentinel reported XID 48 on (its SysLogsXIDError condition) and a
    node-problem-detector plugin XID 79 (GPUProblem): each condition is a node fault with its XID, level, GPUs and
    words; the healthy NVSentinel check (status False) is none. Before issue 42 a Node was not-a-configmap."""
    doc = as_json(capsys, "-f", str(FIXTURES / "gpu" / "nvsentinel-node.json"))
    assert doc["rejections"] == []
    got = [(f["kind"], f["level"], f["node"], f["codes"], f["reason"]) for f in doc["faults"]]
    assert got == [
        ("node", "RestartNPU", "gpu-node-1", ["XID-48"], "SysLogsXIDError"),
        ("node", "SeparateNPU", "gpu-node-1", ["XID-79"], "GPUProblem"),
    ]
    xid48, xid79 = doc["faults"]
    assert xid48["devices"] == ["PCI:0000:3b:00", "GPU:GPU-8f3c2a10-1b2c-4d5e-8f90-0123456789ab"]
    assert "Recommended Action=COMPONENT_RESET" in xid48["detail"]
    assert xid79["detail"] == "XidError79: GPU has fallen off the bus"
