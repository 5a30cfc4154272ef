"""The soak (issue 16, "The proof"), 3 minutes of it on the session's testbed: a seeded random schedule of chip,
node, switch, business and NotReady faults and clears, evictions, agent SIGKILLs and SIGSTOPs with a standby,
Kafka SIGSTOP/SIGKILL and apiserver SIGSTOP, with every invariant of testbed/soak/checks.py asserted.

The seed is random unless ``FAULT_AGENT_SOAK_SEED`` is set, and printed (replay: ``python -m testbed.soak --seed
N --duration 180``); ``FAULT_AGENT_SOAK_DURATION`` changes the length. A failure shrinks the schedule for at most
``FAULT_AGENT_SOAK_SHRINK_S`` seconds (default 480) and shows the shortest schedule that still fails.
A violation of a known defect (:data:`KNOWN`) is printed but does not fail this test.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from testbed.cluster import Testbed
from testbed.soak.cli import soak

KNOWN: frozenset[str] = frozenset()
"""Invariants the agent is known to break today (reported with the soak's results): shown in the report, not
failed on here; `make soak` fails on them."""

pytestmark = pytest.mark.e2e


async def test_soak_three_minutes_every_invariant_holds(testbed: Testbed, tmp_path: Path) -> None:
    seed = int(os.environ.get("FAULT_AGENT_SOAK_SEED") or secrets.randbelow(2**31))
    duration = float(os.environ.get("FAULT_AGENT_SOAK_DURATION") or 180)
    shrink = float(os.environ.get("FAULT_AGENT_SOAK_SHRINK_S") or 480)
    print(
        f"soak seed {seed}, {duration:.0f} s (replay: python -m testbed.soak --seed {seed} --duration {duration:.0f})"
    )
    result = await soak(testbed, seed=seed, duration_s=duration, workdir=tmp_path, shrink_budget_s=shrink)
    print(result.report())
    assert not result.verdict.invariants_failed() - KNOWN, result.report()
