"""testbed.agent_runner.AgentProcess started in a session of its own (a scheduling group of its own under the
kernel's autogroup, as bench_e2e starts the agent it measures) or in the caller's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from testbed.agent_runner import AgentProcess

SESSION = "import os; print(os.getsid(0), os.getpid(), sorted(os.sched_getaffinity(0)))"


def _child(agent: AgentProcess) -> tuple[int, int, list[int]]:
    """What a child started the way `agent` starts its process reports: its session, its pid, its CPUs."""
    run = subprocess.run(
        [sys.executable, "-c", SESSION],
        preexec_fn=agent._before_exec,  # what AgentProcess.start runs in its child
        capture_output=True,
        text=True,
        check=True,
    )
    sid, pid, cpus = run.stdout.split(" ", 2)
    return int(sid), int(pid), [int(c) for c in cpus.strip("[]\n").split(",")]


def _testbed(tmp_path: Path) -> Any:
    return SimpleNamespace(kubeconfig=tmp_path / "kubeconfig", kafka_bootstrap="127.0.0.1:9")


def test_an_agent_in_a_session_of_its_own_leads_that_session(tmp_path: Path) -> None:
    sid, pid, _ = _child(AgentProcess(_testbed(tmp_path), tmp_path, own_session=True))
    assert sid == pid != os.getsid(0)


def test_an_agent_pinned_to_cpus_stays_in_the_callers_session_unless_asked(tmp_path: Path) -> None:
    first = min(os.sched_getaffinity(0))
    sid, _, cpus = _child(AgentProcess(_testbed(tmp_path), tmp_path, cpus=frozenset({first})))
    assert sid == os.getsid(0)
    assert cpus == [first]
    sid, pid, cpus = _child(AgentProcess(_testbed(tmp_path), tmp_path, cpus=frozenset({first}), own_session=True))
    assert sid == pid
    assert cpus == [first]
