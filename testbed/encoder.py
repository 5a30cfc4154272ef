"""The Python side of ``mcencode`` (testbed/mcencode, Go): every MindCluster ConfigMap the testbed writes is made
by Go's encoding/json from struct definitions with MindCluster's field names and types, never by Python.

One long-lived ``mcencode serve`` process per :class:`Encoder` answers one JSON line per request on its stdin (a
round trip costs tens of microseconds, so benchmarks that write thousands of ConfigMaps are not slowed by it).
Python only says *what* to write (which chips, codes, levels, times); the bytes, the health lists, the ``-Fault``
string, the switch levels and NodeStatus, and the CheckCode come from Go. The requests are described in
testbed/mcencode/main.go (``request``) and encode.go (``deviceReq``, ``nodeReq``, ``publicReq``).
"""

from __future__ import annotations

import atexit
import json
import subprocess
import threading
from pathlib import Path
from typing import Any


class EncodeError(ValueError):
    """The Go encoder refused a request; the message is its reason (e.g. a chip index out of range)."""


class Encoder:
    """A running ``mcencode serve``. Thread-safe (one request at a time); :meth:`close` ends the process.

    Args:
        binary: the mcencode executable; None builds (or finds in the testbed cache) the current one.
    """

    def __init__(self, binary: Path | None = None) -> None:
        if binary is None:
            from testbed import build

            binary = build.ensure_mcencode()
        self.binary = binary
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            proc = subprocess.Popen([str(self.binary), "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self._proc = proc
        return proc

    def request(self, op: str, **fields: Any) -> Any:
        """Send one request (``{"op": op, **fields}``) and return the answer's ``ok`` value.

        Raises:
            EncodeError: the encoder refused the request, or its process ended (the message says which).
        """
        line = json.dumps({"op": op, **fields}, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            proc = self._start()
            assert proc.stdin is not None
            assert proc.stdout is not None
            try:
                proc.stdin.write(line)
                proc.stdin.flush()
                reply = proc.stdout.readline()
            except (BrokenPipeError, OSError) as e:
                raise EncodeError(f"mcencode ({self.binary}) is gone: {e}") from e
        if not reply:
            raise EncodeError(f"mcencode ({self.binary}) ended without answering {op!r} (exit {proc.poll()})")
        answer = json.loads(reply)
        if "error" in answer:
            raise EncodeError(f"mcencode {op}: {answer['error']}")
        return answer["ok"]

    def close(self) -> None:
        """End the process (its stdin closed, then terminated after 5 s)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()

    # --- the writers -----------------------------------------------------------------------------------------
    def device_cm(self, device: dict[str, Any]) -> dict[str, Any]:
        """The device plugin's ``mindx-dl-deviceinfo-<node>`` ConfigMap for `device` (encode.go ``deviceReq``:
        node, update_time s, faults [{chip, codes, level, fault_type, time_ms}], recovering, manually_separate,
        prefix, chips, switch {enabled, events [{code, switch_chip, port, level, time_ms, ...}]})."""
        out: dict[str, Any] = self.request("device", device=device)
        return out

    def device_cms(self, devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """:meth:`device_cm` for each of `devices`, in one round trip (the benchmarks' fast path)."""
        out: list[dict[str, Any]] = self.request("devices", devices=devices)
        return out

    def node_cm(self, node: dict[str, Any]) -> dict[str, Any]:
        """NodeD's ``mindx-dl-nodeinfo-<node>`` ConfigMap (``nodeReq``: node, update_time s, devs
        [{device_type, device_id, codes, level}], status)."""
        out: dict[str, Any] = self.request("node", node=node)
        return out

    def public_cm(self, name: str, namespace: str, info: dict[str, Any]) -> dict[str, Any]:
        """A public-fault ConfigMap (label ``mc-consumer-publicfault=true``, key ``PublicFault``) holding `info`
        (MindCluster's ``PubFaultInfo``: id, timestamp ms, version, resource, faults)."""
        out: dict[str, Any] = self.request("public", public={"name": name, "namespace": namespace, "info": info})
        return out


_shared: Encoder | None = None
_shared_lock = threading.Lock()


def shared() -> Encoder:
    """This process's encoder for the stateless writers, started on first use and closed at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Encoder()
            atexit.register(_shared.close)
        return _shared
