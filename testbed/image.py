"""Build the agent's container image with Debian's buildah (no daemon) and run commands inside it.

`python -m testbed.image build [--tag NAME]... [--base auto|official|debian]` builds the repository's
``Dockerfile`` with ``buildah bud`` as root (``vfs`` storage and ``chroot`` isolation: no daemon, no overlay
mounts, no user namespaces, so it works inside a sandbox or a CI container) and prints the image's name and size.

The base (the Dockerfile's ``PYTHON_IMAGE``) is the official python image when a registry can be reached (or it
is already in the store), else a local Debian image made from Debian packages with ``mmdebstrap`` (bookworm,
``python3``, ``python3-venv``, ``ca-certificates``): the machine then needs only Debian's package mirror. That
base is built once, saved as a tar under :func:`cache_dir` and imported into the image store, which lives in
the same folder, so later builds (and CI runs on the same machine) reuse it.

pip inside the build reaches the package index through the host's CA bundle (``PIP_CERT``, else
``SSL_CERT_FILE``, else Debian's ``/etc/ssl/certs/ca-certificates.crt``), passed in as the build secret
``pip-ca``: it is mounted for the RUN steps that run pip and is in no layer of the image.

:class:`Container` runs commands in a built image (``buildah from`` + ``buildah run``) with the host's network,
as the image's user, with bind mounts and environment variables: what the image e2e test uses to run the agent
with in-cluster configuration against the testbed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from testbed.build import BuildError, cache_root

REPO = Path(__file__).resolve().parents[1]
IMAGE_NAME = "localhost/fault-agent"
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python3-venv", "ca-certificates")
# minbase: essential packages plus apt. The merged-usr hook sets up the /usr merge itself (without it mmdebstrap
# installs the usrmerge package, which pulls in all of perl, ~50 MB). Documentation, man pages and
# translations are left out; copyright files stay.
MMDEBSTRAP_OPTIONS = (
    "--variant=minbase",
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    '--aptopt=Acquire::Languages "none"',
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
)
# What the Dockerfile reads from the build context (see .dockerignore): the image is rebuilt when any changes.
BUILD_INPUTS = ("Dockerfile", ".dockerignore", "constraints.txt", "pyproject.toml", "README.md", "agent", "config")
PULL_TIMEOUT_S = 120.0
BUILD_TIMEOUT_S = 1800.0


def _say(msg: str) -> None:
    print(f"[image] {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """The image cache: ``<testbed cache>/image`` (``~/.cache/fault-agent-testbed/image`` by default; see
    :func:`testbed.build.cache_root`). Holds the Debian base's tar, buildah's image store and the build logs."""
    return cache_root() / "image"


def storage_args() -> list[str]:
    """buildah's global options for the project's own image store (vfs, under :func:`cache_dir`)."""
    root = cache_dir()
    return ["--root", str(root / "storage"), "--runroot", str(root / "runroot"), "--storage-driver", "vfs"]


def buildah_path() -> str:
    """The buildah executable. Raises BuildError naming the Debian package when it is missing."""
    path = shutil.which("buildah")
    if path is None:
        raise BuildError(
            "buildah is not installed or not on PATH: install Debian's 'buildah' package (make image-deps)"
        )
    return path


def buildah(
    *args: str, timeout_s: float | None = 300.0, check: bool = True, log: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``buildah <storage options> <args>``; returns the finished process (stdout as text).

    `log`: append stdout and stderr there instead of capturing them. Raises BuildError when `check` and the
    command fails (the message has its stderr, or names the log).
    """
    cmd = [buildah_path(), *storage_args(), *args]
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as out:
            out.write(f"\n$ {' '.join(cmd)}\n")
            out.flush()
            proc = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
            )
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        where = f"log: {log}" if log is not None else (proc.stderr or proc.stdout).strip()[-2000:]
        raise BuildError(f"buildah {args[0]} failed with exit code {proc.returncode}: {where}")
    return proc


def image_exists(name: str) -> bool:
    """True when `name` (a name or ID) is in the project's image store."""
    return buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", name, check=False).returncode == 0


def image_size(name: str) -> str:
    """The image's size as buildah reports it (e.g. ``"282 MB"``). Raises BuildError when it is not in the store."""
    out = json.loads(buildah("images", "--json", name).stdout or "[]")
    if not out:
        raise BuildError(f"image {name} is not in the store ({storage_args()[1]})")
    return str(out[0]["size"])


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """One image build at a time per cache (two CI jobs or test sessions on one machine)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(f"another build holds {root / '.lock'}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def official_base() -> str:
    """The Dockerfile's default ``PYTHON_IMAGE`` (the official python image, fully qualified).

    Raises BuildError when the Dockerfile has no ``ARG PYTHON_IMAGE=…`` line.
    """
    match = re.search(r"^ARG PYTHON_IMAGE=(\S+)", (REPO / "Dockerfile").read_text(), flags=re.MULTILINE)
    if match is None:
        raise BuildError("Dockerfile has no 'ARG PYTHON_IMAGE=<image>' line")
    return match.group(1)


def debian_base_name() -> str:
    """``localhost/fault-agent-base:bookworm-<key>``: the key hashes the suite, packages and mmdebstrap options,
    so changing any of them makes a new base."""
    spec = json.dumps([DEBIAN_SUITE, DEBIAN_PACKAGES, MMDEBSTRAP_OPTIONS]).encode()
    return f"localhost/fault-agent-base:{DEBIAN_SUITE}-{hashlib.sha256(spec).hexdigest()[:12]}"


def debian_base() -> str:
    """The local Debian base image, made with mmdebstrap if neither the store nor the cached tar has it.

    Returns its name. Raises BuildError (with the log's path) when mmdebstrap or the import fails.
    """
    name = debian_base_name()
    if image_exists(name):
        return name
    tag = name.rsplit(":", 1)[1]
    tar = cache_dir() / f"base-{tag}.tar"
    log = cache_dir() / "logs" / f"base-{tag}.log"
    if not tar.exists():
        mmdebstrap = shutil.which("mmdebstrap")
        if mmdebstrap is None:
            raise BuildError("mmdebstrap is not installed or not on PATH: install Debian's 'mmdebstrap' package")
        part = tar.with_suffix(".tar.part")
        started = time.monotonic()
        _say(f"making the Debian {DEBIAN_SUITE} base with mmdebstrap ({', '.join(DEBIAN_PACKAGES)}); log: {log}")
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as out:
            cmd = [mmdebstrap, *MMDEBSTRAP_OPTIONS, f"--include={','.join(DEBIAN_PACKAGES)}", DEBIAN_SUITE, str(part)]
            out.write(f"\n$ {' '.join(cmd)}\n")
            out.flush()
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        if rc != 0:
            part.unlink(missing_ok=True)
            raise BuildError(f"mmdebstrap failed with exit code {rc}; log: {log}")
        part.rename(tar)
        _say(f"Debian base made in {time.monotonic() - started:.0f} s: {tar}")
    started = time.monotonic()
    ctr = buildah("from", "--name", f"fault-agent-base-{uuid.uuid4().hex[:8]}", "scratch").stdout.strip()
    try:
        buildah("add", ctr, str(tar), "/", log=log)
        buildah(
            "config",
            "--env",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--env",
            "LANG=C.UTF-8",
            "--cmd",
            '["python3"]',
            "--label",
            f"org.opencontainers.image.description=Debian {DEBIAN_SUITE} minbase + {' '.join(DEBIAN_PACKAGES)}",
            ctr,
        )
        buildah("commit", "--quiet", ctr, name, log=log)
    finally:
        buildah("rm", ctr, check=False)
    _say(f"Debian base imported as {name} in {time.monotonic() - started:.0f} s")
    return name


def pick_base(choice: str) -> str:
    """The base image for `choice`: ``official`` (pulled if missing; BuildError when that fails), ``debian``
    (:func:`debian_base`) or ``auto`` (official when present or pullable within PULL_TIMEOUT_S, else debian)."""
    if choice == "debian":
        return debian_base()
    official = official_base()
    if image_exists(official):
        return official
    _say(f"pulling {official}")
    try:
        pulled = buildah("pull", "--quiet", official, timeout_s=PULL_TIMEOUT_S, check=False)
        ok, why = pulled.returncode == 0, (pulled.stderr or pulled.stdout).strip().splitlines()[-1:]
    except subprocess.TimeoutExpired:
        ok, why = False, [f"no answer within {PULL_TIMEOUT_S:.0f} s"]
    if ok:
        return official
    if choice == "official":
        raise BuildError(f"cannot pull {official}: {' '.join(why)}")
    _say(f"no registry reachable for {official} ({' '.join(why)}); using the local Debian base")
    return debian_base()


def host_ca_bundle() -> Path | None:
    """The CA bundle pip on this host trusts: ``$PIP_CERT``, ``$SSL_CERT_FILE`` or Debian's bundle; None if none
    of them is a file (the build then uses the base image's own CAs)."""
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def source_digest(repo: Path = REPO) -> str:
    """A short hash of the build's inputs (BUILD_INPUTS, without caches and bytecode): the same tree gives the
    same tag, so :func:`ensure_image` rebuilds only after a change."""
    h = hashlib.sha256()
    for top in BUILD_INPUTS:
        path = repo / top
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if "__pycache__" in f.parts or f.suffix == ".pyc":
                continue
            h.update(str(f.relative_to(repo)).encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Built:
    """A built image: its names (the first is ``localhost/fault-agent:src-<digest>``), base, size as buildah
    reports it (``"282 MB"``) and build time in seconds (0.0 when it was already in the store)."""

    names: tuple[str, ...]
    base: str
    size: str
    seconds: float


def build(repo: Path = REPO, *, tags: Sequence[str] = (), base: str = "auto", force: bool = True) -> Built:
    """Build the Dockerfile of `repo`, tagged ``localhost/fault-agent:src-<digest>`` and `tags`.

    `base`: auto | official | debian (see :func:`pick_base`). `force`: False reuses an image of the same
    source digest. Older ``src-*`` images and dangling layers are removed afterwards (vfs stores each image in
    full). Raises BuildError (with the log's path) when the build fails.
    """
    primary = f"{IMAGE_NAME}:src-{source_digest(repo)}"
    names = (primary, *tags)
    with _lock():
        if not force and image_exists(primary):
            for t in tags:
                buildah("tag", primary, t)
            return Built(names, "(cached)", image_size(primary), 0.0)
        base_image = pick_base(base)
        log = cache_dir() / "logs" / "build.log"
        args = ["bud", "--isolation", "chroot", "--pull=never", "--build-arg", f"PYTHON_IMAGE={base_image}"]
        ca = host_ca_bundle()
        if ca is not None:
            args += ["--secret", f"id=pip-ca,src={ca}"]
        for n in names:
            args += ["--tag", n]
        started = time.monotonic()
        _say(f"building {primary} on {base_image}; log: {log}")
        try:
            buildah(*args, "--file", str(repo / "Dockerfile"), str(repo), timeout_s=BUILD_TIMEOUT_S, log=log)
        except subprocess.TimeoutExpired as e:
            raise BuildError(f"image build did not finish within {BUILD_TIMEOUT_S:.0f} s; log: {log}") from e
        seconds = time.monotonic() - started
        _prune(keep=primary)
    size = image_size(primary)
    _say(f"built {', '.join(names)} in {seconds:.0f} s: {size} (base {base_image}: {image_size(base_image)})")
    return Built(names, base_image, size, seconds)


def _prune(keep: str) -> None:
    """Remove the other ``src-*`` names of IMAGE_NAME (and so their images) and any dangling images."""
    listed = json.loads(buildah("images", "--json", check=False).stdout or "[]")
    for entry in listed:
        for name in entry.get("names") or []:
            if name.startswith(f"{IMAGE_NAME}:src-") and name != keep:
                buildah("rmi", name, check=False)  # untags; removes the image with its last name
    buildah("rmi", "--prune", check=False)


def ensure_image(repo: Path = REPO) -> str:
    """The image of the current source (built now if the store has none); returns its name."""
    return build(repo, force=False).names[0]


class Container:
    """A working container of `image` for running commands in it; remove it with :meth:`close` (or ``with``).

    Commands run with chroot isolation and the host's network (127.0.0.1 is the host's), as the image's user
    (``USER``), in its working directory, with its environment plus the `env` given to each call.
    """

    def __init__(self, image: str) -> None:
        self.image = image
        self.name = f"fault-agent-run-{uuid.uuid4().hex[:10]}"
        buildah("from", "--pull-never", "--name", self.name, image)

    def _args(self, cmd: Sequence[str], env: Mapping[str, str], volumes: Mapping[Path, str]) -> list[str]:
        args = [buildah_path(), *storage_args(), "run", "--isolation", "chroot", "--network", "host"]
        for key, value in env.items():
            args += ["--env", f"{key}={value}"]
        for host, inside in volumes.items():
            args += ["--volume", f"{host}:{inside}:ro"]
        return [*args, self.name, "--", *cmd]

    def run(
        self,
        cmd: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        volumes: Mapping[Path, str] | None = None,
        timeout_s: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run `cmd` to its end; returns the finished process (stdout and stderr as text, not checked).

        `volumes`: host path → path in the container, mounted read-only.
        """
        return subprocess.run(
            self._args(cmd, env or {}, volumes or {}),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )

    def start(
        self,
        cmd: Sequence[str],
        *,
        log: Path,
        env: Mapping[str, str] | None = None,
        volumes: Mapping[Path, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start `cmd` in the background, its output appended to `log`; returns the ``buildah run`` process,
        whose exit code is the command's. buildah does not forward signals to the command (a SIGTERM to it
        kills the command): stop the command with :func:`signal_command`, as a kubelet signals a container's
        main process.
        """
        with log.open("ab") as out:
            return subprocess.Popen(
                self._args(cmd, env or {}, volumes or {}),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    @staticmethod
    def signal_command(proc: subprocess.Popen[bytes], sig: int) -> int:
        """Send `sig` to the command that `proc` (from :meth:`start`) runs: with chroot isolation it shares the
        host's process namespace, a descendant of buildah's own helper processes. Returns its PID.

        Raises ProcessLookupError when the command is not running (any more).
        """
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        todo = list(children.get(proc.pid, []))
        while todo:
            pid = todo.pop(0)
            try:
                argv0 = (Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") or [b""])[0]
            except OSError:
                continue
            if argv0 and b"buildah" not in argv0:
                os.kill(pid, sig)
                return pid
            todo += children.get(pid, [])
        raise ProcessLookupError(f"no command running under buildah run (pid {proc.pid})")

    def close(self) -> None:
        """Remove the working container (its processes must have ended)."""
        buildah("rm", self.name, check=False)

    def __enter__(self) -> Container:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.image", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the Dockerfile (always; the base is reused)")
    b.add_argument("--tag", action="append", default=[], help="extra name, e.g. localhost/fault-agent:0.1.0")
    b.add_argument("--base", choices=("auto", "official", "debian"), default="auto")
    sub.add_parser("base", help="make (or find) the local Debian base and print its name")
    sub.add_parser("where", help="print buildah's storage options for this cache (for buildah images/run by hand)")
    args = parser.parse_args(argv)
    try:
        if args.command == "where":
            print(" ".join(storage_args()))
            return 0
        if args.command == "base":
            with _lock():
                print(debian_base())
            return 0
        built = build(tags=args.tag, base=args.base)
    except BuildError as e:
        print(f"image: {e}", file=sys.stderr)
        return 1
    print(f"{built.names[0]} {built.size} (base {built.base}, {built.seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
