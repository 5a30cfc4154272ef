"""A namespace the testbed's Ascend Operator stand-in manages (testbed/ascend_operator.py), with its own nodes.
Not a test module."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from support.polling import until

from testbed.ascend_operator import NAMESPACE_LABEL
from testbed.inject import Injector
from testbed.rest import Rest, RestError

PIN = "testbed.fault-agent.io/test"
"""The node label a stand-in namespace's nodes carry (value: the namespace); its jobs' pods select it."""


def exists(rest: Rest, path: str) -> bool:
    """True when GET `path` answers (any RestError: False)."""
    try:
        rest.get(path)
    except RestError:
        return False
    return True


@contextmanager
def standin_namespace(rest: Rest, prefix: str, nodes: int) -> Iterator[str]:
    """Create a namespace named `prefix`-<random> labelled for the stand-in, and `nodes` 8-chip nodes
    ``<namespace>-n<i>`` labelled :data:`PIN` = the namespace; yield the namespace's name once its default
    ServiceAccount exists; delete the namespace and the nodes after."""
    key, _, value = NAMESPACE_LABEL.partition("=")
    name = f"{prefix}-{secrets.token_hex(3)}"
    rest.request("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": {key: value}}})
    names = [f"{name}-n{i}" for i in range(nodes)]
    Injector(rest).add_nodes(names)
    for node in names:
        rest.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {PIN: name}}})
    until(lambda: exists(rest, f"/api/v1/namespaces/{name}/serviceaccounts/default"), "default ServiceAccount")
    try:
        yield name
    finally:
        rest.request("DELETE", f"/api/v1/namespaces/{name}")
        Injector(rest).delete_nodes(names)
