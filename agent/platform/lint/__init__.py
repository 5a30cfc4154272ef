"""`fault-agent lint FILE…`: find mistakes in fault-tolerant job files before they reach the cluster.

A file is a YAML stream holding one Volcano Job (`batch.volcano.sh/v1alpha1` Job), AscendJob
(`mindxdl.gitee.com/v1`), JobSet (`jobset.x-k8s.io/v1alpha2`) or Kubeflow Trainer v2 TrainJob
(`trainer.kubeflow.org/v1alpha1`: where its opt-in labels must be to reach its JobSet; `submit` does not take one)
and optionally its `rings-config-<job>` and `reset-config-<job>` ConfigMaps, as in
MindCluster's integration guide. The rules come from the guide and shared/DOMAIN.md §2; each problem names its
field path (e.g. ``spec.tasks[0].template.spec.restartPolicy``) and a rule slug. A problem is an error or a
warning: warnings (printed as "warning: …") are worth knowing but do not make the file wrong, so they do not
change the exit code and do not stop `submit`. The module is pure (no Kubernetes client).

The rules are one module per topic: ``labels``, ``jobs`` (Volcano Job and AscendJob), ``templates`` (pod
templates, GPU jobs), ``configmaps`` (rings-config, reset-config), ``jobset`` (JobSet, TrainJob); ``common`` holds
the problem and the checker. This module reads the file and dispatches each document.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from agent.core.detect.common import json_type
from agent.platform.builders import (
    ASCEND_API_VERSION,
    ASCEND_KIND,
    JOBSET_API_VERSION,
    JOBSET_KIND,
    VOLCANO_API_VERSION,
    VOLCANO_KIND,
)
from agent.platform.lint.common import (
    ERROR,
    WARNING,
    Checker,
    Problem,
    a_or_an,
    get_in,
)
from agent.platform.lint.jobs import (
    VOLCANO_DEFAULT_MAX_RETRY,
    check_job,
)
from agent.platform.lint.jobset import (
    TRAINJOB_API_VERSION,
    TRAINJOB_KIND,
    check_jobset,
    check_trainjob,
)
from agent.platform.lint.templates import (
    GPU_RESOURCE_PREFIXES,
    NPU_RESOURCE_PREFIX,
    is_gpu_job,
    job_uses_gpus,
)

__all__ = [
    "ERROR",
    "GPU_RESOURCE_PREFIXES",
    "NPU_RESOURCE_PREFIX",
    "TRAINJOB_API_VERSION",
    "TRAINJOB_KIND",
    "VOLCANO_DEFAULT_MAX_RETRY",
    "WARNING",
    "Problem",
    "configure",
    "is_gpu_job",
    "job_uses_gpus",
    "lint_documents",
    "lint_file",
    "lint_text",
]


def lint_documents(docs: Sequence[Any], file: str = "<input>") -> list[Problem]:
    """Check the documents of one job file (already parsed YAML/JSON, None for empty documents).

    Returns every problem found, in document order; an empty list means the file is fine.
    """
    problems: list[Problem] = []
    jobs: list[tuple[int, Mapping[str, Any], str]] = []
    cms: dict[str, tuple[int, Any]] = {}
    for n, doc in enumerate(docs, start=1):
        if doc is None:
            continue
        c = Checker(file, n)
        if not isinstance(doc, Mapping):
            c.add("", "not-an-object", f"document is {a_or_an(json_type(doc))}, expected a Kubernetes object")
        else:
            api, kind = doc.get("apiVersion"), doc.get("kind")
            if (api, kind) in (
                (VOLCANO_API_VERSION, VOLCANO_KIND),
                (ASCEND_API_VERSION, ASCEND_KIND),
                (JOBSET_API_VERSION, JOBSET_KIND),
                (TRAINJOB_API_VERSION, TRAINJOB_KIND),
            ):
                jobs.append((n, doc, str(kind)))
            elif (api, kind) == ("v1", "ConfigMap"):
                name = get_in(doc, "metadata", "name")
                if isinstance(name, str):
                    cms[name] = (n, doc)
            else:
                c.add(
                    "kind",
                    "unsupported-kind",
                    f"{api} {kind} is not a Volcano Job ({VOLCANO_API_VERSION} Job), an AscendJob "
                    f"({ASCEND_API_VERSION} AscendJob), a JobSet ({JOBSET_API_VERSION} JobSet), a TrainJob "
                    f"({TRAINJOB_API_VERSION} TrainJob) or a ConfigMap",
                )
        problems.extend(c.problems)
    if not jobs and not problems:
        problems.append(Problem(file, 0, "", "no-job", "the file holds no Volcano Job, AscendJob, JobSet or TrainJob"))
    if len(jobs) > 1:
        problems.append(Problem(file, jobs[1][0], "", "several-jobs", "one job per file, found " + str(len(jobs))))
    for n, job, kind in jobs:
        c = Checker(file, n)
        if kind == JOBSET_KIND:
            check_jobset(c, job)
        elif kind == TRAINJOB_KIND:
            check_trainjob(c, job)
        else:
            check_job(c, job, kind, cms)
        problems.extend(c.problems)
    return problems


def lint_text(text: str, file: str = "<input>") -> list[Problem]:
    """Parse `text` as a YAML stream and check it; a YAML syntax error is one `yaml-invalid` problem, and so is
    a document nested more than :data:`agent.core.detect.nesting.MAX_NESTING` levels (it would exhaust PyYAML's
    recursion)."""
    from agent.core.detect.nesting import NestingError, yaml_load_all

    try:
        docs = yaml_load_all(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        detail = getattr(e, "problem", None) or str(e)
        if isinstance(e, NestingError):
            return [Problem(file, 0, where, "too-deep", f"a document is {detail}")]
        return [Problem(file, 0, where, "yaml-invalid", f"not valid YAML: {detail}")]
    return lint_documents(docs, file)


def lint_file(path: Path) -> list[Problem]:
    """Read and check one file; an unreadable file is one `unreadable` problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        return [Problem(str(path), 0, "", "unreadable", f"cannot read: {reason}")]
    return lint_text(text, str(path))


def _run(args: argparse.Namespace) -> int:
    total = 0
    for name in args.files:
        problems = lint_file(Path(name))
        errors = [p for p in problems if p.is_error]
        total += len(errors)
        for p in problems:
            print(p)
        if not errors:
            print(f"{name}: ok")
    if total:
        print(f"{total} problem{'s' if total != 1 else ''} found", file=sys.stderr)
        return 1
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of `fault-agent lint`: one or more job files; exit 1 when any error is found."""
    parser.description = (
        "Check fault-tolerant job files for mistakes. Exit code 1 when any file has an error, else 0. "
        "Lines starting with 'warning:' are warnings: worth knowing (e.g. a job without a fault-scheduling or "
        "fault-retry-times label, which the agent will not act on) but they do not change the exit code."
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="job file(s): YAML with a job and its rings-config")
    parser.set_defaults(func=_run)
