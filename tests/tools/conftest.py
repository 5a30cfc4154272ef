"""The tools tier: tests that run an external tool or a child process but need no testbed.

What runs here: promtool (the alert rules), `kubectl kustomize` and helm (deploy/ and the chart), `make -n`,
lint-imports, git (the MindCluster mirror), and the agent itself as a child process (start-up errors, replay
goldens under faketime, the outbox killed with SIGKILL, two processes on one outbox). tests/unit stays pure (no
tool, no subprocess, no sleep of seconds); `make unit` runs both directories on every core, `make quick` neither.

Every test here carries the ``tools`` marker (``-m "not tools"`` leaves them out of any run).
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.tools)
