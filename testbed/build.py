"""Build (once) and cache the testbed's binaries and jars from the package registries.

Everything lands under :func:`cache_root` keyed by version, so a second start takes seconds:

- ``kubernetes-<v>/bin/{kube-apiserver,kube-controller-manager,kube-scheduler}`` built with Go from the module
  proxy through a wrapper module (``k8s.io/kubernetes`` replaces its staging modules with local paths, so it
  cannot be ``go install``-ed; our wrapper pins each ``k8s.io/*`` staging module at the matching ``v0.x.y``,
  read from the tag's own go.mod).
- ``etcd-<v>/bin/{etcd,etcdctl}`` through the same kind of wrapper (etcd's server module has local replaces).
- ``kwok-<v>/bin/kwok`` with ``go install`` (no replace directives).
- ``kafka-<v>/lib/*.jar``: the ``org.apache.kafka:kafka_2.13`` broker and its runtime dependencies copied by
  Maven from Maven Central (``testbed/kafka/pom.xml``).
- ``kafka-tools-<v>/lib/*.jar``: ``org.apache.kafka:kafka-tools`` (the console consumer and producer, which the
  broker artifact does not include) and its runtime dependencies (``testbed/kafka/tools-pom.xml``).
- ``helm-<v>/bin/helm`` with ``go install helm.sh/helm/v3/cmd/helm`` (no replace directives), for the chart tests.
- ``prometheus-operator-<v>/crds/*.yaml``: the ServiceMonitor and PrometheusRule CRDs, read from the
  ``github.com/prometheus-operator/prometheus-operator`` module (``example/prometheus-operator-crd/``); the
  testbed's apiserver gets them at start so the deploy tests apply the real objects.
- ``jobset-<v>/bin/{jobset-manager,jobset.x-k8s.io_jobsets.yaml}``: JobSet's controller manager through
  a wrapper module (the proxy refuses its version list, which ``go install`` asks for) and its CRD copied out of
  the module.
- ``mcencode-<hash>/bin/mcencode``: our own Go program (``testbed/mcencode``, standard library only) that writes
  MindCluster's ConfigMaps through Go's encoding/json; keyed by a hash of its sources, so an edit rebuilds it.

Go's module and build caches and the Maven repository stay in their default places, so later builds reuse them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from testbed import versions


class BuildError(RuntimeError):
    """A build step failed. The message names the step and the log file that holds its output."""


def cache_root() -> Path:
    """Where binaries and jars are cached: $FAULT_AGENT_TESTBED_CACHE, else $XDG_CACHE_HOME or ~/.cache,
    plus ``fault-agent-testbed``."""
    explicit = os.environ.get("FAULT_AGENT_TESTBED_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fault-agent-testbed"


def _say(msg: str) -> None:
    print(f"[testbed] {msg}", file=sys.stderr, flush=True)


def _require_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BuildError(f"{name} is not installed or not on PATH: {hint}")
    return path


def _run(step: str, cmd: Sequence[str], *, cwd: Path, log: Path, env: dict[str, str] | None = None) -> None:
    """Run one build step, appending its output to `log`; print progress with the elapsed time."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    _say(f"{step} ... (log: {log})")
    with log.open("a", encoding="utf-8") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        last_note = started
        while True:
            try:
                rc = proc.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if now - last_note >= 30:
                    _say(f"{step}: still running, {now - started:.0f} s")
                    last_note = now
    elapsed = time.monotonic() - started
    if rc != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise BuildError(
            f"build step '{step}' failed with exit code {rc} after {elapsed:.0f} s; full log: {log}\n"
            + "\n".join("    " + line for line in tail)
        )
    _say(f"{step}: done in {elapsed:.1f} s")


def _go_env() -> dict[str, str]:
    return {"CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"}


def _done(bin_dir: Path, names: Sequence[str]) -> bool:
    return (bin_dir / ".complete").exists() and all((bin_dir / n).exists() for n in names)


def _finish(tmp_dir: Path, bin_dir: Path) -> None:
    (tmp_dir / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n")
    if bin_dir.exists():
        shutil.rmtree(bin_dir)
    tmp_dir.rename(bin_dir)


def _module_gomod(go: str, module: str, cwd: Path) -> str:
    """The go.mod text of `module` (``path@version``) as the module proxy serves it."""
    info = subprocess.run([go, "mod", "download", "-json", module], capture_output=True, text=True, cwd=cwd)
    if info.returncode != 0:
        raise BuildError(f"build step 'go mod download {module}' failed:\n{info.stdout}{info.stderr}")
    return Path(json.loads(info.stdout)["GoMod"]).read_text(encoding="utf-8")


def _wrapper_build(
    component: str,
    version: str,
    tools: dict[str, str],
    gomod: Callable[[str, Path], list[str]],
    *,
    ldflags: str = "-s -w",
) -> Path:
    """Build the main packages `tools` (binary name -> package) through a wrapper module of ours.

    `gomod(go, src)` returns the wrapper's go.mod lines; each package is recorded with ``go get -tool`` at
    `version`, then compiled with CGO off into ``<cache>/<component>-<version>/bin``. Returns that folder.

    Raises:
        BuildError: Go missing, a module the proxy refuses, or a compile error (naming the log).
    """
    root = cache_root() / f"{component}-{version}"
    bin_dir = root / "bin"
    if _done(bin_dir, list(tools)):
        return bin_dir
    go = _require_tool("go", "install Go >= 1.25")
    src = root / "src"
    src.mkdir(parents=True, exist_ok=True)
    log = cache_root() / "logs" / f"build-{component}-{version}.log"
    (src / "go.mod").write_text("\n".join(gomod(go, src)) + "\n", encoding="utf-8")
    (src / "go.sum").unlink(missing_ok=True)
    pkgs = list(dict.fromkeys(tools.values()))
    _run(f"resolve {component} modules", [go, "get", "-tool", *(f"{p}@{version}" for p in pkgs)], cwd=src, log=log)
    tmp = root / "bin.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, pkg in tools.items():
        _run(
            f"compile {name} {version} (minutes on 2 cores for the large ones)",
            [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp / name), pkg],
            cwd=src,
            log=log,
            env=_go_env(),
        )
    _finish(tmp, bin_dir)
    return bin_dir


def kubernetes_bins() -> Path:
    """Build kube-apiserver, kube-controller-manager and kube-scheduler if missing; return their folder.

    ``k8s.io/kubernetes`` requires its staging modules at v0.0.0 and replaces them with local paths; our wrapper
    pins each ``k8s.io/*`` staging module named in the tag's own go.mod at the matching ``v0.<minor>.<patch>``.

    Raises:
        BuildError: Go missing, the module proxy refusing a module, or a compile error.
    """
    v = versions.KUBERNETES

    def gomod(go: str, src: Path) -> list[str]:
        text = _module_gomod(go, f"k8s.io/kubernetes@{v}", src)
        staging = sorted(
            {
                parts[0]
                for line in text.splitlines()
                if (parts := line.split())
                and len(parts) == 2
                and parts[0].startswith("k8s.io/")
                and parts[1] == "v0.0.0"
            }
        )
        if not staging:
            raise BuildError(f"no k8s.io staging modules found in the go.mod of k8s.io/kubernetes@{v}")
        minor = v.removeprefix("v1.")
        lines = ["module faultagent.local/k8s-wrapper", "", "go 1.25.0", "", f"require k8s.io/kubernetes {v}", ""]
        return lines + [f"replace {m} => {m} v0.{minor}" for m in staging]

    major, minor_num = v.removeprefix("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion={v}", f"-X {pkg}.gitMajor={major}", f"-X {pkg}.gitMinor={minor_num}"]
        flags += [f"-X {pkg}.gitTreeState=clean"]
    names = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    return _wrapper_build(
        "kubernetes", v, {n: f"k8s.io/kubernetes/cmd/{n}" for n in names}, gomod, ldflags=" ".join(flags)
    )


def etcd_bins() -> Path:
    """Build etcd and etcdctl if missing; return their folder. The server module has local replaces, so it
    is built through a wrapper module whose only requirements are the real ones.

    Raises:
        BuildError: Go missing or a failing build step.
    """
    return _wrapper_build(
        "etcd",
        versions.ETCD,
        {"etcd": "go.etcd.io/etcd/server/v3", "etcdctl": "go.etcd.io/etcd/etcdctl/v3"},
        lambda go, src: ["module faultagent.local/etcd-wrapper", "", "go 1.25.0"],
    )


def volcano_bins() -> Path:
    """Build Volcano's vc-controller-manager and vc-scheduler if missing; return their folder.

    Volcano's go.mod replaces ``volcano.sh/apis`` with a local staging folder that the module zip lacks, so our
    wrapper copies Volcano's other (non-local) replace pins and requires ``volcano.sh/apis`` at the release the
    module proxy serves (versions.VOLCANO_APIS).

    Raises:
        BuildError: Go missing, a module refused by the proxy, or a compile error.
    """
    v = versions.VOLCANO

    def gomod(go: str, src: Path) -> list[str]:
        text = _module_gomod(go, f"volcano.sh/volcano@{v}", src)
        pins: list[str] = []
        in_block = False
        for line in text.splitlines():
            item = line.split("//", 1)[0].strip()
            if item.startswith("replace ("):
                in_block = True
                continue
            if in_block and item == ")":
                in_block = False
                continue
            body = item.removeprefix("replace ").strip() if item.startswith("replace ") else (item if in_block else "")
            if "=>" in body and not body.split("=>", 1)[1].strip().startswith((".", "/")):
                pins.append(body)
        go_line = next((ln for ln in text.splitlines() if ln.startswith("go ")), "go 1.24.0")
        lines = ["module faultagent.local/volcano-wrapper", "", go_line, ""]
        lines += [f"require volcano.sh/volcano {v}", f"require volcano.sh/apis {versions.VOLCANO_APIS}", ""]
        return lines + [f"replace {pin}" for pin in pins]

    tools = {
        "vc-controller-manager": "volcano.sh/volcano/cmd/controller-manager",
        "vc-scheduler": "volcano.sh/volcano/cmd/scheduler",
    }
    return _wrapper_build("volcano", v, tools, gomod)


def kwok_bins() -> Path:
    """Build kwok if missing; return its folder.

    Raises:
        BuildError: Go missing or a failing build step.
    """
    v = versions.KWOK
    root = cache_root() / f"kwok-{v}"
    bin_dir = root / "bin"
    if _done(bin_dir, ["kwok"]):
        return bin_dir
    go = _require_tool("go", "install Go >= 1.25")
    log = cache_root() / "logs" / f"build-kwok-{v}.log"
    tmp = root / "bin.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run(
        f"compile kwok {v}",
        [go, "install", "-trimpath", "-ldflags", "-s -w", f"sigs.k8s.io/kwok/cmd/kwok@{v}"],
        cwd=root,
        log=log,
        env={**_go_env(), "GOBIN": str(tmp)},
    )
    _finish(tmp, bin_dir)
    return bin_dir


def jobset_bins() -> Path:
    """Build JobSet's controller manager (``jobset-manager``) if missing and copy its JobSet CRD beside it;
    return the folder. ``sigs.k8s.io/jobset`` has no replace directives, but ``go install <module>@<v>`` asks
    the proxy for the module's version list (deprecation check), which the proxy refuses for this module; a
    wrapper module that requires the exact version builds it. Its CRD ships in the module
    (``config/components/crd/bases``).

    Raises:
        BuildError: Go missing, the proxy refusing the module, the CRD missing, or a compile error.
    """
    v = versions.JOBSET
    bin_dir = cache_root() / f"jobset-{v}" / "bin"
    if _done(bin_dir, ["jobset-manager", JOBSET_CRD]):
        return bin_dir
    bin_dir = _wrapper_build(
        "jobset",
        v,
        {"jobset-manager": "sigs.k8s.io/jobset"},
        lambda go, src: ["module faultagent.local/jobset-wrapper", "", "go 1.24.0"],
    )
    go = _require_tool("go", "install Go >= 1.25")
    module = f"sigs.k8s.io/jobset@{v}"
    info = subprocess.run([go, "mod", "download", "-json", module], capture_output=True, text=True, cwd=bin_dir)
    if info.returncode != 0:
        raise BuildError(f"build step 'go mod download {module}' failed:\n{info.stdout}{info.stderr}")
    crd = Path(json.loads(info.stdout)["Dir"]) / "config" / "components" / "crd" / "bases" / JOBSET_CRD
    if not crd.is_file():
        raise BuildError(f"{module} has no {crd}")
    shutil.copyfile(crd, bin_dir / JOBSET_CRD)
    return bin_dir


JOBSET_CRD = "jobset.x-k8s.io_jobsets.yaml"


def kafka_lib() -> Path:
    """Copy the Kafka broker's jars from Maven Central if missing; return the folder of jars.

    Raises:
        BuildError: Maven or Java missing, or Maven failing to resolve the artifacts.
    """
    return _maven_lib("kafka", "pom.xml", "kafka_2.13")


def kafka_tools_lib() -> Path:
    """Copy ``org.apache.kafka:kafka-tools`` (``org.apache.kafka.tools.consumer.ConsoleConsumer`` and the other
    command-line tools) and its runtime dependencies from Maven Central if missing; return the folder of jars.
    Run a tool with ``java -cp '<folder>/*' <class>``; :func:`kafka_tool_argv` builds that command line.

    Raises:
        BuildError: Maven or Java missing, or Maven failing to resolve the artifacts.
    """
    return _maven_lib("kafka-tools", "tools-pom.xml", "kafka-tools")


def kafka_tool_argv(main_class: str, *args: str) -> list[str]:
    """The command line that runs `main_class` of Kafka's tools (e.g.
    ``org.apache.kafka.tools.consumer.ConsoleConsumer``) with `args`, building the jars first if missing.

    Raises:
        BuildError: as :func:`kafka_tools_lib`.
    """
    lib = kafka_tools_lib()
    java = _require_tool("java", "install Java 17 or newer (Debian: apt-get install -y openjdk-17-jre-headless)")
    return [java, "-Xmx256m", "-cp", f"{lib}/*", main_class, *args]


def _maven_lib(component: str, pom_name: str, main_artifact: str) -> Path:
    """Copy the runtime dependencies of ``testbed/kafka/<pom_name>`` (at versions.KAFKA) into
    ``<cache>/<component>-<version>/lib``; `main_artifact` names the jar that must be there afterwards."""
    v = versions.KAFKA
    root = cache_root() / f"{component}-{v}"
    lib = root / "lib"
    if (lib / ".complete").exists():
        return lib
    mvn = _require_tool("mvn", "install Maven 3 (Debian: apt-get install -y maven)")
    _require_tool("java", "install Java 17 or newer (Debian: apt-get install -y openjdk-17-jre-headless)")
    log = cache_root() / "logs" / f"fetch-{component}-{v}.log"
    pom = Path(__file__).with_name("kafka") / pom_name
    tmp = root / "lib.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run(
        f"fetch {component} {v} jars from Maven Central",
        [
            mvn,
            "-B",
            "-q",
            "-f",
            str(pom),
            f"-Dkafka.version={v}",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={tmp}",
            "-DincludeScope=runtime",
        ],
        cwd=root,
        log=log,
    )
    if not any(tmp.glob(f"{main_artifact}-*.jar")):
        raise BuildError(f"Maven finished but no {main_artifact} jar is in {tmp}; log: {log}")
    _finish(tmp, lib)
    return lib


def helm_bins() -> Path:
    """Build helm if missing; return its folder. ``helm.sh/helm/v3`` has no replace directives, so
    ``go install`` builds it; the version ldflag makes ``helm version`` print the real version.

    Raises:
        BuildError: Go missing or a failing build step.
    """
    v = versions.HELM
    root = cache_root() / f"helm-{v}"
    bin_dir = root / "bin"
    if _done(bin_dir, ["helm"]):
        return bin_dir
    go = _require_tool("go", "install Go >= 1.25")
    log = cache_root() / "logs" / f"build-helm-{v}.log"
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / "bin.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # As helm's own Makefile: the Kubernetes version `helm template` and `helm lint` assume (Capabilities) is
    # the client-go minor helm is built with (else v1.20, below the chart's kubeVersion).
    client_go = next(
        (
            parts[1]
            for line in _module_gomod(go, f"helm.sh/helm/v3@{v}", root).splitlines()
            if len(parts := line.split()) >= 2 and parts[0] == "k8s.io/client-go"
        ),
        "",
    )
    if not client_go.startswith("v0."):
        raise BuildError(f"no k8s.io/client-go v0.x requirement in the go.mod of helm.sh/helm/v3@{v}")
    k8s_minor = client_go.split(".")[1]
    ldflags = f"-s -w -X helm.sh/helm/v3/internal/version.version={v}"
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        ldflags += f" -X {pkg}.k8sVersionMajor=1 -X {pkg}.k8sVersionMinor={k8s_minor}"
    _run(
        f"compile helm {v}",
        [go, "install", "-trimpath", "-ldflags", ldflags, f"helm.sh/helm/v3/cmd/helm@{v}"],
        cwd=root,
        log=log,
        env={**_go_env(), "GOBIN": str(tmp)},
    )
    _finish(tmp, bin_dir)
    return bin_dir


# The Prometheus Operator CRDs the deploy/ base and the chart use (of the ten the operator ships).
OPERATOR_CRDS = ("monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml")


def prometheus_operator_crds() -> Path:
    """Copy the ServiceMonitor and PrometheusRule CRDs out of the Prometheus Operator's Go module (downloaded
    through the module proxy into Go's module cache) if missing; return the folder of YAML files.

    Raises:
        BuildError: Go missing, the proxy refusing the module, or a CRD file missing from it.
    """
    v = versions.PROMETHEUS_OPERATOR
    root = cache_root() / f"prometheus-operator-{v}"
    crds = root / "crds"
    if _done(crds, OPERATOR_CRDS):
        return crds
    go = _require_tool("go", "install Go >= 1.25")
    module = f"github.com/prometheus-operator/prometheus-operator@{v}"
    root.mkdir(parents=True, exist_ok=True)
    _say(f"download {module} (its CRDs)")
    info = subprocess.run([go, "mod", "download", "-json", module], capture_output=True, text=True, cwd=root)
    if info.returncode != 0:
        raise BuildError(f"build step 'go mod download {module}' failed:\n{info.stdout}{info.stderr}")
    src = Path(json.loads(info.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
    tmp = root / "crds.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in OPERATOR_CRDS:
        if not (src / name).is_file():
            raise BuildError(f"{module} has no {name} under {src}")
        shutil.copyfile(src / name, tmp / name)
    _finish(tmp, crds)
    return crds


MCENCODE_SRC = Path(__file__).with_name("mcencode")


def mcencode_key() -> str:
    """The first 16 hex digits of the SHA-256 of testbed/mcencode's go.mod and Go files (names and contents)."""
    digest = hashlib.sha256()
    for path in sorted([MCENCODE_SRC / "go.mod", *MCENCODE_SRC.glob("*.go")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def mcencode_bin() -> Path:
    """Build ``mcencode`` (testbed/mcencode) if this version of its sources is not cached; return the binary.

    Only the standard library: no module download, ``GOPROXY=off``. Takes seconds with a warm Go build cache.

    Raises:
        BuildError: Go missing or a compile error (naming the log).
    """
    root = cache_root() / f"mcencode-{mcencode_key()}"
    bin_dir = root / "bin"
    if _done(bin_dir, ["mcencode"]):
        return bin_dir / "mcencode"
    go = _require_tool("go", "install Go >= 1.25")
    log = cache_root() / "logs" / "build-mcencode.log"
    tmp = root / "bin.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run(
        "compile mcencode",
        [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp / "mcencode"), "."],
        cwd=MCENCODE_SRC,
        log=log,
        env={**_go_env(), "GOPROXY": "off", "GOFLAGS": "-buildvcs=false -mod=mod"},
    )
    _finish(tmp, bin_dir)
    return bin_dir / "mcencode"


def ensure_mcencode() -> Path:
    """:func:`mcencode_bin` under the build lock (for callers outside :func:`build_all`)."""
    root = cache_root() / f"mcencode-{mcencode_key()}" / "bin"
    if _done(root, ["mcencode"]):
        return root / "mcencode"
    with _build_lock():
        return mcencode_bin()


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """One build at a time per cache (two test sessions starting together must not build into one folder)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".build.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(f"another build holds {root / '.build.lock'}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_all() -> dict[str, Path]:
    """Build or find every component; returns name → folder. Raises BuildError on the first failure."""
    started = time.monotonic()
    with _build_lock():
        out = {
            "kafka": kafka_lib(),
            "kafka-tools": kafka_tools_lib(),
            "prometheus-operator": prometheus_operator_crds(),
            "helm": helm_bins(),
            "etcd": etcd_bins(),
            "kwok": kwok_bins(),
            "kubernetes": kubernetes_bins(),
            "volcano": volcano_bins(),
            "jobset": jobset_bins(),
            "mcencode": mcencode_bin().parent,
        }
    _say(f"all components ready in {time.monotonic() - started:.1f} s (cache: {cache_root()})")
    return out
