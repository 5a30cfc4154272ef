"""Run a real Prometheus server (Debian's ``prometheus`` package, the one that also gives ``promtool``) for tests.

The server scrapes the given targets on loopback, evaluates the given rule groups, keeps its data in a folder of
the caller's, and is queried through its HTTP API (``/api/v1/query``, ``/api/v1/alerts``). It dies with the
process that started it.

The rules of ``deploy/prometheusrule.yaml`` are written for a cluster (15-minute windows, ``for: 5m``, a 600 s
threshold); :func:`rule_groups_on_test_scale` turns them into the same expressions on a test's time scale.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed.cluster import _die_with_parent, free_port

PACKAGE_HINT = "install Debian's 'prometheus' package (apt-get install prometheus; `make setup` does it as root)"


class PrometheusError(RuntimeError):
    """The server could not be started, or an API call failed (``errorType``/``error`` of its answer)."""


def find_prometheus() -> str:
    """The path of the Prometheus *server* binary on PATH (not promtool).

    Raises:
        PrometheusError: no ``prometheus`` on PATH, or it is not the server (``--version`` does not say so).
    """
    path = shutil.which("prometheus")
    if path is None:
        raise PrometheusError(f"the prometheus server binary is not on PATH: {PACKAGE_HINT}")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False, timeout=30)
    if not (out.stdout + out.stderr).startswith("prometheus, version"):
        raise PrometheusError(f"{path} is not the Prometheus server ({(out.stdout + out.stderr)[:200]!r})")
    return path


def rule_groups_on_test_scale(
    prometheus_rule: dict[str, Any],
    *,
    window: str = "20s",
    hold: str = "1s",
    bucket_bounds: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The rule groups of a PrometheusRule object (its ``spec.groups``) on a test's time scale.

    Every range selector (``[15m]``) becomes ``[window]``, every ``for:`` becomes `hold`, and each histogram
    bound matcher ``le="<old>..."`` in `bucket_bounds` (old number → new number) has only its number replaced,
    so the rule's own spelling is kept (``le="600.0"`` → ``le="1.0"``; a rule written ``le="600"`` stays wrong
    as ``le="1"``). Nothing else of the expressions, labels or annotations changes.
    """
    groups: list[dict[str, Any]] = json.loads(json.dumps(prometheus_rule["spec"]["groups"]))
    for group in groups:
        for rule in group["rules"]:
            expr = re.sub(r"\[\d+[smhd]\]", f"[{window}]", rule["expr"])
            for old, new in (bucket_bounds or {}).items():
                expr = re.sub(rf'le="{re.escape(old)}((?:\.0*)?)"', rf'le="{new}\1"', expr)
            rule["expr"] = expr
            if "for" in rule:
                rule["for"] = hold
    return groups


class PrometheusServer:
    """One Prometheus process on 127.0.0.1 at a free port.

    Start it from the thread that lives as long as the server should (the test's main thread): it is killed
    when the thread that started it ends (PR_SET_PDEATHSIG), so an ``asyncio.to_thread`` worker would not do.

    Args:
        workdir: folder for its configuration, rules, data (``data/``) and log (``prometheus.log``).
        targets: ``host:port`` addresses scraped as job ``fault-agent`` at `interval_s` (``/metrics``).
        rule_groups: rule groups as in a Prometheus rules file (``groups:``), evaluated every `interval_s`.
        scrape_jobs: more scrape jobs, job name → ``host:port`` targets (``/metrics``, every `interval_s`), e.g.
            a training loop's step counter (testbed.step_metrics).
    """

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str],
        rule_groups: list[dict[str, Any]],
        *,
        interval_s: float = 1.0,
        scrape_jobs: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.workdir = workdir
        self.targets = list(targets)
        self.scrape_jobs = {"fault-agent": list(targets), **{k: list(v) for k, v in (scrape_jobs or {}).items()}}
        self.rule_groups = rule_groups
        self.interval = f"{int(interval_s * 1000)}ms"
        self.port = free_port()
        self.log = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, ready_timeout_s: float = 30.0) -> None:
        """Write the configuration and rules, start the server and wait until it is ready and has scraped every
        target once.

        Raises:
            PrometheusError: the binary is missing, the configuration is refused, or it is not ready in time
                (the message carries the log's tail).
        """
        binary = find_prometheus()
        self.workdir.mkdir(parents=True, exist_ok=True)
        rules = self.workdir / "rules.yaml"
        rules.write_text(yaml.safe_dump({"groups": self.rule_groups}, sort_keys=False))
        config = {
            "global": {"scrape_interval": self.interval, "evaluation_interval": self.interval},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {
                    "job_name": job,
                    "scrape_interval": self.interval,
                    "scrape_timeout": self.interval,
                    "static_configs": [{"targets": targets}],
                }
                for job, targets in self.scrape_jobs.items()
            ],
        }
        config_file = self.workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self.proc.returncode}; log {self.log}:\n{self.tail()}")
            if self._ready() and self._scraped_all():
                return
            time.sleep(0.2)
        raise PrometheusError(f"prometheus not ready within {ready_timeout_s} s; log {self.log}:\n{self.tail()}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                return int(resp.status) == 200
        except OSError:
            return False

    def _scraped_all(self) -> bool:
        for job, targets in self.scrape_jobs.items():
            up = self.query(f'up{{job="{job}"}}')
            if len(up) != len(targets) or not all(s["value"][1] == "1" for s in up):
                return False
        return True

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after `timeout_s`)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>`` with `params`; returns the answer's ``data``.

        Raises:
            PrometheusError: the server answered ``status: error`` (e.g. a parse error: ``bad_data``).
        """
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query now; returns the vector's samples (``metric``, ``value`` = [time, "text"])."""
        data = self.api("query", query=expr)
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr!r} gave a {data['resultType']}, not a vector")
        result: list[dict[str, Any]] = data["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        """The active alerts (pending and firing), each with ``labels``, ``annotations`` and ``state``."""
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return alerts

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
