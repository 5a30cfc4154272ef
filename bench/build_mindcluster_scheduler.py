"""Build MindCluster's Volcano scheduler (Volcano's vc-scheduler with ascend-for-volcano in it), outside the repo.

A measurement tool only: ``bench/bench_plugin.py`` runs this scheduler beside the testbed's Volcano controller as
the MindCluster arm. Nothing of MindCluster enters this repository; the recipe reads its source from a git mirror
and builds in a folder of its own (default ``<testbed cache>/mindcluster-volcano-<commit>-<volcano version>``).

What MindCluster's own recipe does (``component/ascend-for-volcano/build/build.sh`` at the mirror's commit): it
places the plugin's package at ``pkg/scheduler/plugins/ascend-volcano-plugin`` of a Volcano source tree (v1.9.0,
v1.12.0 or v1.15.0 per its ``build/volcano-v1.x.yaml``), patches two Volcano files, and builds ``vc-scheduler``
plus the plugin as a Go plugin (``-buildmode=plugin``, a ``volcano-npu_<version>.so`` loaded by
``vc-scheduler --plugins-dir``). This recipe differs in three ways, none with effect on what the plugin does in
a session:

- Volcano is the testbed's release (``testbed.versions.VOLCANO``, v1.14.1; build.sh says the plugin supports
  1.10+), so the scheduler runs against the testbed's CRDs and controller unchanged. Its go.mod's
  ``volcano.sh/apis => ./staging/...`` replace (the module zip has no staging folder) becomes a require of
  ``volcano.sh/apis`` at ``testbed.versions.VOLCANO_APIS``, as testbed/build.py does for the stock scheduler.
- The plugin is compiled into ``vc-scheduler`` instead of loaded from a ``.so``: its top-level files' ``package
  main`` becomes ``package ascendvolcanoplugin`` in the build tree, Volcano's ``pkg/scheduler/plugins/factory.go``
  gets one ``framework.RegisterPluginBuilder(PluginName, New)``, and ``PluginName`` is set by ``-ldflags -X`` to
  :data:`PLUGIN_NAME` as build.sh sets it. Volcano's ``.so`` loader registers the same ``New`` under the same
  name (``pkg/scheduler/framework/plugins.go`` ``LoadCustomPlugins``); a ``-buildmode=plugin`` build recompiles
  every dependency for dynamic linking, which on this shared 2-core machine did not finish in 20 minutes.
- Of build.sh's two patches, the allocate one is applied (``case len(nodes) == 1`` loses its shortcut, so a single
  candidate node is still scored by the plugin's node-order functions); the controller one (an ``Ignore`` case in
  ``pkg/controllers/job/state/running.go``'s ``switch action {``) does not apply to v1.14.1, whose switch is on
  ``action.Action`` (build.sh's ``grep``/``sed`` would not match either), and the controller is the testbed's
  own stock one.

    python bench/build_mindcluster_scheduler.py [--mirror DIR] [--commit 22bb3d98] [--out DIR]

Prints the build folder, whose ``bin/vc-scheduler`` has the plugin registered as :data:`PLUGIN_NAME` (the name
the scheduler's configuration gives it).
Go's module and build caches stay in their default places; the Go module proxy serves Volcano's modules
(``GOFLAGS=-mod=mod``). The compile runs under ``nice``.

Raises (exits non-zero with): the mirror or commit missing, a module refused by the proxy, a patch that no longer
matches (named), or the compile error (the log file's path is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from testbed import versions
from testbed.build import cache_root

MIRROR = Path("/work/.mirror/Ascend+mind-cluster/repo")
COMMIT = "22bb3d98"
PLUGIN_SRC = "component/ascend-for-volcano"
PLUGIN_DIR = "pkg/scheduler/plugins/ascend-volcano-plugin"
PLUGIN_IMPORT = "volcano.sh/volcano/" + PLUGIN_DIR
# The name build.sh gives the plugin (volcano-npu_<release>): the .so's stem and the configuration's plugin name.
PLUGIN_NAME = "volcano-npu_v26.1.0"


class BuildFailed(RuntimeError):
    """A step of the recipe failed; the message names the step."""


def _run(cmd: list[str], *, cwd: Path, log: Path | None = None, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, check=False)
    if log is not None:
        with log.open("a", encoding="utf-8") as f:
            f.write(f"$ {' '.join(cmd)}\n{out.stdout}{out.stderr}\n")
    if out.returncode != 0:
        where = f" (log: {log})" if log is not None else ""
        raise BuildFailed(f"{' '.join(cmd[:3])} failed with {out.returncode}{where}: {out.stderr.strip()[-2000:]}")
    return out.stdout


def _writable(tree: Path) -> None:
    for root, dirs, files in os.walk(tree):
        for name in dirs + files:
            p = Path(root, name)
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    tree.chmod(tree.stat().st_mode | stat.S_IWUSR)


def _extract_plugin(mirror: Path, commit: str, dest: Path) -> str:
    """Archive the plugin's folder at `commit` from the bare `mirror` into `dest`; return the full commit id."""
    full = _run(["git", f"--git-dir={mirror}", "rev-parse", f"{commit}^{{commit}}"], cwd=Path.cwd()).strip()
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = Path(tmp, "plugin.tar")
        _run(["git", f"--git-dir={mirror}", "archive", "-o", str(tar_path), full, PLUGIN_SRC], cwd=Path.cwd())
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="data")
        shutil.copytree(Path(tmp, PLUGIN_SRC), dest, dirs_exist_ok=True)
    return full


def _volcano_tree(dest: Path, log: Path) -> None:
    """Copy Volcano's module source (testbed version) to `dest` and make its go.mod build without staging/."""
    info = json.loads(
        _run(["go", "mod", "download", "-json", f"volcano.sh/volcano@{versions.VOLCANO}"], cwd=Path.cwd(), log=log)
    )
    shutil.copytree(info["Dir"], dest, symlinks=True)
    _writable(dest)
    gomod = dest / "go.mod"
    lines = gomod.read_text().splitlines()
    kept = [ln for ln in lines if not ln.strip().startswith("volcano.sh/apis =>")]
    if len(kept) != len(lines) - 1:
        raise BuildFailed("go.mod: expected exactly one 'volcano.sh/apis => ./staging/...' replace")
    text = "\n".join(kept) + "\n"
    if "volcano.sh/apis v0.0.0" not in text:
        raise BuildFailed("go.mod: expected 'volcano.sh/apis v0.0.0' in the require block")
    gomod.write_text(text.replace("volcano.sh/apis v0.0.0", f"volcano.sh/apis {versions.VOLCANO_APIS}"))


def _patch_allocate(tree: Path) -> None:
    """build.sh's allocate patch: the single-candidate shortcut becomes the scored default branch."""
    path = tree / "pkg/scheduler/actions/allocate/allocate.go"
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("case len(nodes) == 1:"):
            indent = line[: len(line) - len(line.lstrip())]
            # build.sh replaces this line and the next two (the shortcut and the `case len(nodes) > 1:` line).
            if not lines[i + 2].strip().startswith("case len(nodes) > 1:"):
                raise BuildFailed(f"{path}: the line after the shortcut is not 'case len(nodes) > 1:'")
            lines[i : i + 3] = [indent + "default:"]
            path.write_text("\n".join(lines) + "\n")
            return
    raise BuildFailed(f"{path}: no 'case len(nodes) == 1:' to patch")


def _library(plugin: Path) -> None:
    """Make the plugin's top-level package (``package main``, for ``-buildmode=plugin``) importable."""
    changed = 0
    for path in sorted(plugin.glob("*.go")):
        text = path.read_text()
        if text.startswith("package main\n") or "\npackage main\n" in text:
            path.write_text(text.replace("package main\n", "package ascendvolcanoplugin\n", 1))
            changed += 1
    if not changed:
        raise BuildFailed(f"{plugin}: no 'package main' file")


def _register(tree: Path) -> None:
    """Import the plugin in Volcano's plugin factory and register its builder under its PluginName."""
    path = tree / "pkg/scheduler/plugins/factory.go"
    text = path.read_text()
    anchor, hook = "import (\n", "func init() {\n"
    if anchor not in text or hook not in text:
        raise BuildFailed(f"{path}: no import block or init() to hook")
    text = text.replace(anchor, anchor + f'\tascendnpu "{PLUGIN_IMPORT}"\n', 1)
    text = text.replace(hook, hook + "\tframework.RegisterPluginBuilder(ascendnpu.PluginName, ascendnpu.New)\n", 1)
    path.write_text(text)


def build(mirror: Path, commit: str, out: Path | None) -> Path:
    """Build (once) and return the build folder holding ``bin/vc-scheduler``."""
    full = _run(["git", f"--git-dir={mirror}", "rev-parse", f"{commit}^{{commit}}"], cwd=Path.cwd()).strip()
    root = out or cache_root() / f"mindcluster-volcano-{full[:12]}-{versions.VOLCANO}"
    binary = root / "bin" / "vc-scheduler"
    if binary.exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    log = root / "build.log"
    tree = root / "volcano"
    if tree.exists():
        _writable(tree)
        shutil.rmtree(tree)
    _volcano_tree(tree, log)
    _extract_plugin(mirror, full, tree / PLUGIN_DIR)
    _patch_allocate(tree)
    _library(tree / PLUGIN_DIR)
    _register(tree)
    (root / "SOURCE").write_text(
        f"volcano.sh/volcano {versions.VOLCANO} (apis {versions.VOLCANO_APIS})\n"
        f"{PLUGIN_SRC} at {full} from {mirror}, compiled in as {PLUGIN_NAME}\n"
    )
    # CGO_ENABLED=1 as build.sh builds vc-scheduler (and as the Go build cache already holds Volcano's packages)
    env = {"GOFLAGS": "-mod=mod", "CGO_ENABLED": "1"}
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp_bin = binary.with_suffix(".tmp")
    name_flag = f"-X {PLUGIN_IMPORT}.PluginName={PLUGIN_NAME}"
    _run(["nice", "-n", "15", "go", "build", "-ldflags", name_flag, "-o", str(tmp_bin), "./cmd/scheduler"],
         cwd=tree, log=log, env=env)  # fmt: skip
    tmp_bin.rename(binary)
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mirror", type=Path, default=MIRROR, help="bare git mirror of Ascend/mind-cluster")
    parser.add_argument("--commit", default=COMMIT, help="the mirror's commit to build the plugin from")
    parser.add_argument("--out", type=Path, default=None, help="build folder (default: in the testbed cache)")
    args = parser.parse_args()
    try:
        print(build(args.mirror, args.commit, args.out))
    except BuildFailed as exc:
        print(f"build_mindcluster_scheduler: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
