"""What every lint rule shares: a problem, its severity, the checker collecting a document's problems, and
reading a manifest that may have any shape."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Problem:
    """One mistake: where (file, 1-based document number, dotted field path), which rule, and what to do.

    `severity` is ERROR (the file is wrong: exit 1) or WARNING (shown as "warning: …", exit code unchanged).
    """

    file: str
    document: int
    path: str
    rule: str
    message: str
    severity: str = ERROR

    @property
    def is_error(self) -> bool:
        return self.severity == ERROR

    def __str__(self) -> str:
        where = f"{self.file}" + (f" (document {self.document})" if self.document else "")
        prefix = "" if self.is_error else f"{self.severity}: "
        return f"{prefix}{where}: {self.path or '<document>'}: {self.message} [{self.rule}]"


@dataclass(frozen=True, slots=True)
class Template:
    """A pod template inside a job: its path, its owner (task or replica type) and its restart policy."""

    path: str
    owner: str
    body: Any
    restart_policy: Any
    restart_policy_path: str
    replicas: Any


class Checker:
    """Collects the problems of one document (`file`, 1-based `document`) in :attr:`problems`."""

    def __init__(self, file: str, document: int) -> None:
        self.file = file
        self.document = document
        self.problems: list[Problem] = []

    def add(self, path: str, rule: str, message: str, severity: str = ERROR) -> None:
        self.problems.append(Problem(self.file, self.document, path, rule, message, severity))


def get_in(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]…``, or None where a level is missing or not a mapping (a manifest may have any shape)."""
    for k in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(k)
    return obj


def as_list(obj: Any) -> list[Any]:
    """`obj` when it is a list, else an empty list."""
    return obj if isinstance(obj, list) else []


def int_label(c: Checker, labels: Mapping[str, Any], key: str, low: int, high: int, rule: str) -> int | None:
    """The label `key` as an integer in ``[low, high]``; None when absent, not a string, or invalid (then a
    problem `rule` is added)."""
    value = labels.get(key)
    if value is None or not isinstance(value, str):
        return None
    # ASCII decimal digits only, as the agent reads the label (agent.sources.jobs.fault_retry_times_problem):
    # Python's int() would also take "1_0", "+3", " 3" and non-ASCII digits, which the agent refuses
    number = int(value) if value.isascii() and value.isdigit() else None
    if number is None or not low <= number <= high:
        c.add(f"metadata.labels.{key}", rule, f"{key} must be an integer {low}–{high}, got {value!r}")
        return None
    return number


def a_or_an(word: str) -> str:
    """`word` with its indefinite article ("an object", "a list")."""
    return f"{'an' if word[:1] in ('a', 'e', 'i', 'o', 'u') else 'a'} {word}"
