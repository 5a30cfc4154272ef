"""The soak's invariant 6 (testbed/soak/checks.py ``check_controller``): no Volcano controller conflict caused by
the agent and no write of the agent's on job objects; the conflicts in all and the pods created then killed per
restart are figures."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.soak.checks import Observed, check_all, check_controller
from testbed.soak.runner import BOUNDS
from testbed.soak.schedule import ACTING_LEVELS


def _costs(conflicts: int = 0, after_agent: int = 0, job_writes: int = 0, wasted: int = 0) -> dict[str, Any]:
    return {
        "conflicts": {"total": conflicts, "conflicts": conflicts, "after_agent": after_agent, "log": "vc.log"},
        "wasted": {"pods": wasted, "restarts": 3, "with": min(wasted, 3), "max": wasted, "late": 0, "unseen": 0},
        "job_writes": job_writes,
    }


@pytest.mark.parametrize(
    ("controller", "violations"),
    [
        pytest.param({}, 0, id="not-measured"),
        pytest.param(_costs(), 0, id="clean"),
        pytest.param(_costs(conflicts=4, wasted=2), 0, id="controller-races-itself-figures-only"),
        pytest.param(_costs(conflicts=4, after_agent=1), 1, id="a-conflict-after-an-agent-write"),
        pytest.param(_costs(job_writes=2), 1, id="the-agent-wrote-on-a-job"),
    ],
)
def test_check_controller(controller: dict[str, Any], violations: int) -> None:
    found = check_controller(controller)
    assert len(found) == violations
    assert all(v.invariant == "controller" for v in found)


def test_the_costs_are_figures_of_the_verdict() -> None:
    verdict = check_all(Observed(controller=_costs(conflicts=4, wasted=2)), BOUNDS, acting_levels=ACTING_LEVELS)
    assert verdict.ok
    assert verdict.figures["controller_conflicts"] == 4
    assert verdict.figures["controller_conflicts_by_agent"] == 0
    assert verdict.figures["pods_created_then_killed"] == 2
