"""The README's job-submission walkthrough has every step a fresh testbed needs (issue 41, 8): NPU nodes before
`submit --wait` (a new testbed has none, so the wait timed out), and for the guide's AscendJob the node label its
Worker's nodeSelector asks for, in a namespace the testbed's Ascend Operator stand-in manages, said in the text.
Read from README.md, config/examples/ and the testbed's own constants; the steps themselves were run on a testbed
(the e2e tier runs the same AscendJob under the stand-in: tests/e2e/test_ascendjob_standin.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from testbed import ascend_operator
from testbed.inject import kwok_node

ROOT = Path(__file__).resolve().parents[3]
NPU = "huawei.com/Ascend910"
TESTBED_NODE = kwok_node("node-0")  # what `testbed nodes N` makes


def _block_submitting(example: str) -> list[list[str]]:
    """The ```bash block of README.md that submits config/examples/`example`, its commands split as the shell
    would (comments dropped)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M) if f"-f config/examples/{example}" in b]
    assert len(blocks) == 1, f"README.md has {len(blocks)} blocks submitting {example}"
    return [shlex.split(line, comments=True) for line in blocks[0].splitlines() if line.strip()]


def _index(block: list[list[str]], *words: str) -> int:
    return next(i for i, c in enumerate(block) if all(w in c for w in words))


def _example(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = list(yaml.safe_load_all((ROOT / "config" / "examples" / name).read_text()))
    (job,) = [d for d in docs if d["kind"] in ("Job", "AscendJob")]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    return cm, job


def _pod_specs(job: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(replicas, pod spec) of each task of a Volcano Job or replica spec of an AscendJob."""
    if job["kind"] == "Job":
        return [(t["replicas"], t["template"]["spec"]) for t in job["spec"]["tasks"]]
    return [(r["replicas"], r["template"]["spec"]) for r in job["spec"]["replicaSpecs"].values()]


def test_the_volcano_walkthrough_makes_enough_npu_nodes_before_it_waits() -> None:
    block = _block_submitting("vcjob-mindx-dls-test.yaml")
    submit = _index(block, "submit", "--wait")
    nodes = [c for c in block[:submit] if c[1:4] == ["-m", "testbed", "nodes"]]
    assert nodes, "the walkthrough submits with --wait on a testbed that has no NPU nodes"
    count = int(nodes[0][4])
    _, job = _example("vcjob-mindx-dls-test.yaml")
    pods = [
        int(c["resources"]["requests"][NPU])
        for replicas, spec in _pod_specs(job)
        for c in spec["containers"]
        for _ in range(replicas)
    ]
    assert all(chips <= int(TESTBED_NODE["status"]["allocatable"][NPU]) for chips in pods)
    assert len(pods) <= count  # one pod per node at most: each asks for a whole node's chips
    namespace = job["metadata"]["namespace"]
    assert _index(block, "kubectl", "create", "namespace", namespace) < submit


def test_the_ascendjob_walkthrough_labels_the_node_its_worker_asks_for_and_says_it_runs_under_the_stand_in() -> None:
    block = _block_submitting("acjob-default-test-pytorch.yaml")
    submit = _index(block, "submit", "--wait")
    label_commands = [c for c in block[:submit] if c[:3] == ["kubectl", "label", "node"]]
    labels = dict(arg.split("=", 1) for c in label_commands for arg in c[4:] if "=" in arg)
    _, job = _example("acjob-default-test-pytorch.yaml")
    for _, spec in _pod_specs(job):
        # a label the testbed's nodes lack, or carry with another value, must be set by the walkthrough
        missing = spec.get("nodeSelector", {}).items() - TESTBED_NODE["metadata"]["labels"].items()
        assert missing <= labels.items(), f"the walkthrough labels no node {dict(missing)}"
    # the stand-in manages the example's namespace: `testbed up` labels `default` for it
    assert job["metadata"]["namespace"] == "default"
    assert ascend_operator.NAMESPACE_LABEL.startswith("testbed.fault-agent.io/")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    intro = readme[: readme.index("config/examples/acjob-default-test-pytorch.yaml --wait")]
    assert "Ascend Operator stand-in" in intro[-600:], "the README does not say the example runs under the stand-in"
