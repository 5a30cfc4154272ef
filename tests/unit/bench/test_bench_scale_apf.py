"""bench/bench_scale.py's --apf mode: its argument checks, the APF metric parsing, and deploy/'s FlowSchema subject."""
# ruff: noqa: E501

from __future__ import annotations

from types import ModuleType

import pytest
from support.bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench_script("bench_scale.py", "_bench_scale_under_test")


SMALL = ["--nodes", "20", "--pods", "200", "--jobs", "10"]


@pytest.mark.parametrize(
    ("argv", "apf", "seats"),
    [
        ([*SMALL, "--faults", "5"], False, 30),  # two windows: 2 × 5 ≤ 10
        ([*SMALL, "--faults", "3", "--apf"], True, 30),  # three windows: 3 × 3 ≤ 10
        ([*SMALL, "--faults", "2", "--apf", "--apf-seats", "8"], True, 8),
    ],
)
def test_accepted_command_lines(bench: ModuleType, argv: list[str], apf: bool, seats: int) -> None:
    args = bench.parse_args(argv)
    assert (args.apf, args.apf_seats) == (apf, seats)


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        ([*SMALL, "--faults", "4", "--apf"], "--faults × 3"),  # 3 × 4 > 10 jobs
        ([*SMALL, "--faults", "6"], "--faults × 2"),
        ([*SMALL, "--faults", "2", "--apf", "--dir", "/tmp/tb"], "drop --dir"),  # attached testbed has APF off
        ([*SMALL, "--faults", "2", "--apf", "--apf-seats", "1"], "--apf-seats"),
        (["--nodes", "20", "--pods", "150", "--jobs", "10"], "sizes must satisfy"),
    ],
)
def test_rejected_command_lines_say_why(bench: ModuleType, argv: list[str], reason: str) -> None:
    with pytest.raises(SystemExit, match=reason):
        bench.parse_args(argv)


# real /metrics lines (hence the long lines)
METRICS = """\
# HELP apiserver_flowcontrol_rejected_requests_total [BETA] Number of requests rejected by API Priority and Fairness
apiserver_flowcontrol_rejected_requests_total{flow_schema="service-accounts",priority_level="workload-low",reason="queue-full"} 3
apiserver_flowcontrol_rejected_requests_total{flow_schema="service-accounts",priority_level="workload-low",reason="time-out"} 2
apiserver_flowcontrol_request_wait_duration_seconds_sum{execute="true",flow_schema="fault-agent",priority_level="fault-agent"} 0.5
apiserver_flowcontrol_request_wait_duration_seconds_count{execute="true",flow_schema="fault-agent",priority_level="fault-agent"} 10
apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute="true",flow_schema="fault-agent",priority_level="fault-agent",le="0.1"} 10
apiserver_request_total{code="200"} 99
apiserver_flowcontrol_request_wait_duration_seconds_count{execute="true"} 7
apiserver_flowcontrol_rejected_requests_total{priority_level="workload-low"} not-a-number
"""


def test_apf_metrics_are_summed_per_priority_level(bench: ModuleType) -> None:
    got = bench.parse_apf_metrics(METRICS)
    assert got == {
        ("apiserver_flowcontrol_rejected_requests_total", "workload-low"): 5.0,
        ("apiserver_flowcontrol_request_wait_duration_seconds_sum", "fault-agent"): 0.5,
        ("apiserver_flowcontrol_request_wait_duration_seconds_count", "fault-agent"): 10.0,
    }


def test_apf_delta_reports_only_what_happened_in_the_window(bench: ModuleType) -> None:
    before = bench.parse_apf_metrics(METRICS)
    after = dict(before)
    after[("apiserver_flowcontrol_rejected_requests_total", "workload-low")] = 9.0
    after[("apiserver_flowcontrol_request_wait_duration_seconds_sum", "fault-agent")] = 1.5
    after[("apiserver_flowcontrol_request_wait_duration_seconds_count", "fault-agent")] = 14.0
    rejected, wait = bench.apf_delta(before, after)
    assert rejected == {"workload-low": 4.0}
    assert wait == {"fault-agent": (4.0, pytest.approx(0.25))}
    assert bench.apf_delta(before, before) == ({}, {})


def test_deploys_flowschema_matches_deploys_service_account(bench: ModuleType) -> None:
    assert bench.flowschema_subject() == ("fault-agent", "fault-agent")
