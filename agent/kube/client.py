"""Client construction and the raw-JSON transport of the watch engine.

:func:`new_api_client` picks credentials in this order: an explicit kubeconfig path, the in-cluster service
account (when ``KUBERNETES_SERVICE_HOST`` is set), ``$KUBECONFIG``, ``~/.kube/config``. kubernetes_asyncio's
ApiClient does authentication and TLS; :class:`ApiTransport` uses its ``call_api`` with
``_preload_content=False`` and reads the aiohttp response body itself, so the hot path never builds the
generated model classes.
"""

from __future__ import annotations

import asyncio
import os
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson
import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from agent.kube.errors import (
    KubeApiError,
    KubeConfigError,
    KubeConnectionError,
    KubeError,
    StreamCorrupt,
    api_error,
    kube_call,
    parse_retry_after,
)
from agent.kube.watch import ListPage, Resource


def resolve_kubeconfig(kubeconfig: str | None) -> str:
    """The kubeconfig path to use: `kubeconfig`, else the first path of ``$KUBECONFIG``, else ``~/.kube/config``.

    Raises:
        KubeConfigError: that file does not exist.
    """
    path = kubeconfig
    if path is None:
        env = os.environ.get("KUBECONFIG", "")
        path = env.split(os.pathsep)[0] if env else os.path.expanduser("~/.kube/config")
    if os.path.isdir(path):
        raise KubeConfigError(f"kubeconfig {path} is a directory, not a file")
    if not os.path.isfile(path):
        raise KubeConfigError(f"no kubeconfig at {path} and not running in a cluster")
    return path


def _check_kubeconfig_shape(path: str) -> None:
    """A kubeconfig is a YAML mapping; the client library fails on anything else with an unrelated TypeError.

    Raises:
        KubeConfigError: not YAML, or not a mapping.
    """
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise KubeConfigError(f"kubeconfig {path} cannot be read as YAML: {e}") from e
    if not isinstance(doc, dict):
        raise KubeConfigError(
            f"kubeconfig {path} is not a kubeconfig: expected a YAML mapping with clusters, users and contexts, "
            f"got {type(doc).__name__}"
        )


async def new_api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A logged-in ``kubernetes_asyncio.client.ApiClient``. Close it with ``await client.close()``.

    Args:
        kubeconfig: kubeconfig path; None tries the in-cluster service account, then ``$KUBECONFIG``
            (first path), then ``~/.kube/config``.
        context: kubeconfig context; None uses the file's current context. Ignored in-cluster.

    Raises:
        KubeConfigError: no usable credentials (the message says which places were tried).
    """
    configuration = k8s_client.Configuration()
    tried: list[str] = []
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return without_per_request_env_lookups(k8s_client.ApiClient(configuration=configuration))
        path = resolve_kubeconfig(kubeconfig)
        tried.append(path)
        try:
            _check_kubeconfig_shape(path)
        except KubeConfigError as e:
            raise KubeConfigError(f"cannot load Kubernetes credentials (tried {tried}): {e}") from e
        await k8s_config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration, persist_config=False
        )
    except KubeConfigError:
        raise
    except (k8s_config.ConfigException, OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as e:
        raise KubeConfigError(f"cannot load Kubernetes credentials (tried {tried or ['in-cluster']}): {e}") from e
    return without_per_request_env_lookups(k8s_client.ApiClient(configuration=configuration))


def without_per_request_env_lookups(api_client: Any) -> Any:
    """`api_client` (a kubernetes_asyncio ApiClient) with its aiohttp session's ``trust_env`` off when no proxy
    from the environment applies to the apiserver; returned for chaining.

    kubernetes_asyncio (client/rest.py) opens its session with ``trust_env=True``, so aiohttp looks up
    ``*_PROXY``/``NO_PROXY`` and reads ``~/.netrc`` on every request (profiled: ~5% of the agent's CPU during a
    restart burst, all of it on the event loop). The environment is read once here instead: when it names a
    proxy for the apiserver's URL (``HTTPS_PROXY`` without a matching ``NO_PROXY``), or the kubeconfig set one,
    the library's session is kept as it is (the proxy is honoured exactly as before); otherwise the session is
    replaced by one on the same connector (TLS context, pool limit) and read buffer without the lookups. No proxy
    and no netrc credentials are ever needed to reach an apiserver with the agent's token or client certificate.
    """
    rest = api_client.rest_client
    if rest.proxy:
        return api_client
    if env_proxy_for(api_client.configuration.host):
        return api_client
    old = rest.pool_manager
    rest.pool_manager = aiohttp.ClientSession(connector=old.connector, trust_env=False, read_bufsize=_READ_BUFSIZE)
    old.detach()  # the connector now belongs to the new session; the old one is closed without closing it
    return api_client


def env_proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url` (``https_proxy``/``HTTPS_PROXY`` and the other schemes' variables,
    unless ``no_proxy``/``NO_PROXY`` exempts the host), or None: the lookup aiohttp makes per request with
    ``trust_env`` (aiohttp helpers.py ``get_env_proxy_for_url``), through the same standard-library calls."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname is not None and urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


_READ_BUFSIZE = 2**21
"""kubernetes_asyncio's read buffer (client/rest.py: watch events of large objects exceed aiohttp's default)."""


async def namespace_missing(core: Any, namespace: str) -> bool:
    """True only when the apiserver says `namespace` does not exist (404); False when it exists or the caller
    may not read namespaces (then nothing is claimed). `core`: a kubernetes_asyncio ``CoreV1Api``.

    Raises:
        KubeApiError: any answer other than 404 and 403 (a connection error passes through as the client raised it).
    """
    try:
        await kube_call(core.read_namespace(namespace))
    except KubeApiError as e:
        if e.status == 404:
            return True
        if e.status == 403:
            return False
        raise
    return False


class ApiTransport:
    """The watch engine's :class:`~agent.kube.watch.Transport` over a kubernetes_asyncio ApiClient.

    Args:
        api_client: a logged-in ApiClient (see :func:`new_api_client`); not closed by this class.
        request_timeout_s: total timeout of one list page request.
    """

    def __init__(self, api_client: Any, *, request_timeout_s: float = 60.0) -> None:
        self.api = api_client
        self.request_timeout_s = request_timeout_s

    async def _get(self, path: str, query: list[tuple[str, str]], limits: aiohttp.ClientTimeout) -> Any:
        try:
            resp = await self.api.call_api(
                path,
                "GET",
                query_params=query,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=limits,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise KubeConnectionError(f"GET {path}: {type(e).__name__}: {e}") from e
        if resp.status >= 300:
            try:
                body = await resp.read()
            except (aiohttp.ClientError, OSError, TimeoutError):
                body = b""
            finally:
                resp.release()
            message = _status_message(body) or resp.reason or ""
            raise api_error(
                resp.status,
                f"GET {path}: HTTP {resp.status}: {message}",
                retry_after=parse_retry_after(resp.headers.get("Retry-After")),
            )
        return resp

    async def list_page(self, resource: Resource, *, limit: int, continue_token: str) -> ListPage:
        """One page of the collection as raw dicts (see :class:`~agent.kube.watch.Transport`).

        Raises:
            ResourceGone: the continue token expired. KubeApiError, KubeConnectionError, StreamCorrupt.
        """
        query = [*_selectors(resource), ("limit", str(limit))]
        if continue_token:
            query.append(("continue", continue_token))
        resp = await self._get(resource.path, query, aiohttp.ClientTimeout(total=self.request_timeout_s))
        try:
            body = await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise KubeConnectionError(f"GET {resource.path}: body: {type(e).__name__}: {e}") from e
        finally:
            resp.release()
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise StreamCorrupt(f"GET {resource.path}: list body is not JSON: {e}") from e
        if not isinstance(doc, dict):
            raise StreamCorrupt(f"GET {resource.path}: list body is not an object")
        items = doc.get("items") or []
        meta = doc.get("metadata") or {}
        if not isinstance(items, list) or not isinstance(meta, dict):
            raise StreamCorrupt(f"GET {resource.path}: list without items/metadata")
        rv = meta.get("resourceVersion", "")
        token = meta.get("continue", "") or ""
        if not isinstance(rv, str) or not isinstance(token, str):
            raise StreamCorrupt(f"GET {resource.path}: list metadata has wrong types")
        return ListPage([i for i in items if isinstance(i, dict)], rv, token)

    @asynccontextmanager
    async def watch(
        self, resource: Resource, *, resource_version: str, timeout_s: int
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Open a watch stream; yields an iterator of raw body chunks. Closes the connection on exit.

        Raises:
            ResourceGone (410 on the request), KubeApiError, KubeConnectionError (also mid-stream).
        """
        query = [
            *_selectors(resource),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_s)),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        # No total timeout: the server ends the stream after timeoutSeconds; silence is the caller's deadline.
        timeout = aiohttp.ClientTimeout(total=None, connect=30, sock_connect=30)
        resp = await self._get(resource.path, query, timeout)
        try:
            yield _chunks(resp, resource.path)
        finally:
            resp.close()


async def _chunks(resp: Any, path: str) -> AsyncIterator[bytes]:
    try:
        async for chunk in resp.content.iter_any():
            yield chunk
    except (aiohttp.ClientError, OSError) as e:
        raise KubeConnectionError(f"watch {path}: stream broke: {type(e).__name__}: {e}") from e
    except asyncio.IncompleteReadError as e:
        raise KubeConnectionError(f"watch {path}: stream cut: {e}") from e


def _selectors(resource: Resource) -> list[tuple[str, str]]:
    q: list[tuple[str, str]] = []
    if resource.label_selector:
        q.append(("labelSelector", resource.label_selector))
    if resource.field_selector:
        q.append(("fieldSelector", resource.field_selector))
    return q


def _status_message(body: bytes) -> str:
    """The ``message`` of a metav1.Status body, or "" when the body is not one."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:200].decode("utf-8", "replace")
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return str(doc["message"])
    return ""


__all__ = ["ApiTransport", "KubeError", "new_api_client"]
