"""How the agent's metrics are served and labelled: the constant ``cluster`` label added to every series at
scrape time (:func:`with_constant_labels`), a label value from a string or an enum (:func:`label_value`), a HELP
text's list of values (:func:`listed`) and the agent's version for the build-info metric.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from importlib import metadata

from prometheus_client import CollectorRegistry, Metric

from agent.core.faults import FaultLevel


def listed(values: Iterable[str]) -> str:
    """Label values as a HELP text names them: ``a, b, c``, each once, in first-seen order."""
    return ", ".join(dict.fromkeys(values))


def label_value(value: str | enum.Enum) -> str:
    """A label value from a string or an enum: FaultLevel by its vendor name, other enums by their value."""
    if isinstance(value, FaultLevel):
        return value.wire_name
    if isinstance(value, enum.Enum):
        return str(value.value)
    return value


def agent_version() -> str:
    """This package's installed version ("unknown" when it is not installed)."""
    try:
        return metadata.version("fault-agent")
    except metadata.PackageNotFoundError:
        return "unknown"


class ConstantLabels:
    """A collector showing every family of `registry` with `labels` set on each sample (a sample's own label of
    the same name is overwritten). prometheus_client has no constant labels of its own."""

    def __init__(self, registry: CollectorRegistry, labels: Mapping[str, str]) -> None:
        self._registry = registry
        self._labels = dict(labels)

    def collect(self) -> Iterator[Metric]:
        for fam in self._registry.collect():
            out = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            out.samples = [s._replace(labels={**s.labels, **self._labels}) for s in fam.samples]
            yield out


def with_constant_labels(registry: CollectorRegistry, labels: Mapping[str, str]) -> CollectorRegistry:
    """A registry to serve: `registry`'s series, read at each scrape, each with `labels` added."""
    view = CollectorRegistry(auto_describe=False)
    view.register(ConstantLabels(registry, labels))
    return view
