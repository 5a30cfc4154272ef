"""bench/build_mindcluster_scheduler.py's source edits and bench/bench_plugin.py's scheduler configuration.

The edits are checked on text shaped like Volcano v1.14.1's files (written here, not copied); a file that no
longer has the shape must fail the build with a message naming it, never build something else.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import yaml
from support.bench_scripts import load_bench_script

ALLOCATE = """package allocate

func pick() {
\t\tswitch {
\t\tcase len(nodes) == 0:
\t\t\tlog()
\t\tcase len(nodes) == 1: // one node
\t\t\tbestNode = nodes[0]
\t\tcase len(nodes) > 1: // score them
\t\t\tscore()
\t\t}
}
"""


def _load(name: str, file: str) -> ModuleType:
    return load_bench_script(file, name)


@pytest.fixture(scope="module")
def recipe() -> ModuleType:
    return _load("_build_mindcluster_scheduler_under_test", "build_mindcluster_scheduler.py")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _load("_bench_plugin_under_test", "bench_plugin.py")


def test_the_allocate_patch_turns_the_single_node_shortcut_into_the_scored_default(
    recipe: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "pkg/scheduler/actions/allocate/allocate.go"
    path.parent.mkdir(parents=True)
    path.write_text(ALLOCATE)
    recipe._patch_allocate(tmp_path)
    text = path.read_text()
    assert "len(nodes) == 1" not in text
    assert "bestNode = nodes[0]" not in text
    assert "len(nodes) > 1" not in text
    assert "\t\tdefault:\n\t\t\tscore()\n" in text
    assert "\t\tcase len(nodes) == 0:\n\t\t\tlog()\n" in text  # the rest untouched


def test_the_allocate_patch_refuses_a_file_of_another_shape(recipe: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "pkg/scheduler/actions/allocate/allocate.go"
    path.parent.mkdir(parents=True)
    path.write_text(ALLOCATE.replace("case len(nodes) > 1:", "case len(nodes) >= 2:"))
    with pytest.raises(recipe.BuildFailed, match="len\\(nodes\\) > 1"):
        recipe._patch_allocate(tmp_path)
    path.write_text("package allocate\n")
    with pytest.raises(recipe.BuildFailed, match="no 'case len\\(nodes\\) == 1:'"):
        recipe._patch_allocate(tmp_path)


def test_the_plugin_becomes_a_library_registered_in_volcanos_factory(recipe: ModuleType, tmp_path: Path) -> None:
    plugin = tmp_path / recipe.PLUGIN_DIR
    plugin.mkdir(parents=True)
    (plugin / "npu.go").write_text("// header\npackage main\n\nfunc New() {}\n")
    (plugin / "type.go").write_text('package main\n\nvar PluginName = "x"\n')
    (plugin / "sub").mkdir()
    (plugin / "sub" / "a.go").write_text("package sub\n")
    recipe._library(plugin)
    assert (plugin / "npu.go").read_text() == "// header\npackage ascendvolcanoplugin\n\nfunc New() {}\n"
    assert (plugin / "type.go").read_text().startswith("package ascendvolcanoplugin\n")
    assert (plugin / "sub" / "a.go").read_text() == "package sub\n"

    factory = tmp_path / "pkg/scheduler/plugins/factory.go"
    factory.write_text('package plugins\n\nimport (\n\t"x/framework"\n)\n\nfunc init() {\n\tother()\n}\n')
    recipe._register(tmp_path)
    text = factory.read_text()
    assert f'\tascendnpu "{recipe.PLUGIN_IMPORT}"\n' in text
    assert "func init() {\n\tframework.RegisterPluginBuilder(ascendnpu.PluginName, ascendnpu.New)\n\tother()" in text


def test_no_plugin_package_or_no_factory_hook_fails_the_build(recipe: ModuleType, tmp_path: Path) -> None:
    plugin = tmp_path / "p"
    plugin.mkdir()
    (plugin / "a.go").write_text("package other\n")
    with pytest.raises(recipe.BuildFailed, match="no 'package main'"):
        recipe._library(plugin)
    factory = tmp_path / "pkg/scheduler/plugins/factory.go"
    factory.parent.mkdir(parents=True)
    factory.write_text("package plugins\n")
    with pytest.raises(recipe.BuildFailed, match="no import block"):
        recipe._register(tmp_path)


def test_the_scheduler_configuration_is_volcanos_default_with_the_plugin(bench: ModuleType) -> None:
    conf = yaml.safe_load(bench.scheduler_conf("volcano-npu_test"))
    assert conf["actions"] == "enqueue, allocate, backfill"
    names = [[p["name"] for p in tier["plugins"]] for tier in conf["tiers"]]
    assert names[0] == ["priority", "gang", "conformance", "volcano-npu_test"]
    assert names[1] == ["overcommit", "drf", "predicates", "proportion", "nodeorder", "binpack"]
    params = conf["configurations"][0]
    assert params["name"] == "init-params"
    assert params["arguments"]["useClusterInfoManager"] == "false"
