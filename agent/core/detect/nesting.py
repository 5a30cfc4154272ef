"""How deep a parsed document may nest, and a YAML loader that refuses deeper ones. Pure: no I/O.

Python's parsers and encoders recurse once per level: PyYAML's composer and constructor, ``json``'s encoder (the
CheckCode), even ``==`` between two parsed objects. A document a few kilobytes long (``[[[[…]]]]`` a thousand
levels deep) is enough to raise ``RecursionError`` in any of them. orjson stops at 1,024 levels by itself, which
is still deeper than the interpreter's limit of 1,000 frames.

No MindCluster format nests more than six levels (a public fault's ``faults[].influence[].deviceIds[]``), nor
does a Kubernetes object the command line reads (a Volcano Job's pod template is the deepest, about twelve), so
:data:`MAX_NESTING` levels is far beyond any real document and far below every recursion limit.
"""

from __future__ import annotations

from itertools import compress
from typing import Any

import yaml

MAX_NESTING = 64
"""Lists and objects nested deeper than this are refused (see the module docstring)."""


def too_deep(value: object, limit: int = MAX_NESTING) -> bool:
    """True when `value` (parsed JSON or YAML: dicts, lists, scalars) nests lists or dicts more than `limit`
    levels deep. Iterative, so it never recurses itself: one level at a time, the containers among each level's
    children picked in C (by exact type: ``dict``, ``list``, ``tuple``, as the parsers make them), so a document
    costs about a third of a walk that tests each child in Python."""
    if not isinstance(value, dict | list | tuple):
        return False
    level: list[Any] = [value]
    depth = 1
    while True:
        if depth > limit:
            return True
        below: list[Any] = []
        for node in level:
            children = node.values() if isinstance(node, dict) else node
            below.extend(compress(children, map(_IS_CONTAINER, map(type, children))))
        if not below:
            return False
        level = below
        depth += 1


_IS_CONTAINER = frozenset((dict, list, tuple)).__contains__


def too_deep_message(limit: int = MAX_NESTING) -> str:
    """The words a rejection uses for a document nested more than `limit` levels."""
    return f"nested more than {limit} levels deep"


class NestingError(yaml.YAMLError):
    """A YAML document nested more than :data:`MAX_NESTING` levels. Carries ``problem`` and ``problem_mark`` as
    PyYAML's own errors do, so code that reports a YAML error by its mark reports this one too."""

    def __init__(self, problem: str, problem_mark: yaml.Mark | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = problem_mark

    def __str__(self) -> str:
        if self.problem_mark is None:
            return self.problem
        return f"{self.problem} (line {self.problem_mark.line + 1}, column {self.problem_mark.column + 1})"


class BoundedSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that raises :class:`NestingError` for a node more than :data:`MAX_NESTING` levels
    deep, before PyYAML's recursive composer (and then its constructor) can run out of stack."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise NestingError(too_deep_message(), event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def yaml_load(text: str) -> Any:
    """``yaml.safe_load`` of `text` with :class:`BoundedSafeLoader`.

    Raises:
        yaml.YAMLError: not YAML, or nested too deep (:class:`NestingError`).
    """
    return yaml.load(text, Loader=BoundedSafeLoader)  # a SafeLoader subclass: safe


def yaml_load_all(text: str) -> list[Any]:
    """Every document of the YAML stream `text` (``yaml.safe_load_all``), with :class:`BoundedSafeLoader`.

    Raises:
        yaml.YAMLError: not YAML, or a document nested too deep (:class:`NestingError`).
    """
    return list(yaml.load_all(text, Loader=BoundedSafeLoader))  # a SafeLoader subclass: safe


def yaml_compose(text: str) -> yaml.Node | None:
    """``yaml.compose`` of `text` with :class:`BoundedSafeLoader` (node tree with line numbers).

    Raises:
        yaml.YAMLError: not YAML, or nested too deep (:class:`NestingError`).
    """
    return yaml.compose(text, Loader=BoundedSafeLoader)  # a SafeLoader subclass: safe
