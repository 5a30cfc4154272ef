"""Unit-tier fixtures.

- `_logging_restored` (autouse, module): a test that runs a CLI command in this process (`replay`, `detect`,
  `lint`) configures structlog and the root logger for the whole process; what the module changed is put back
  after it, so a later module's log assertions (test_kube_watch) see their own configuration whatever order the
  modules run in.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True, scope="module")
def _logging_restored() -> Iterator[None]:
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)
