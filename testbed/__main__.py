"""The local testbed: `python -m testbed build|up|down|status|env|nodes|inject|scenario|clusterd|kafka-console-consumer
[--dir DIR]`.

`up` builds what is missing (cached), starts every component detached and prints the environment;
`env` prints ``KUBECONFIG=…`` and the Kafka bootstrap address for ``eval "$(python -m testbed env)"``;
`down` stops it; `nodes N` adds N kwok nodes shaped like the guide's (8 NPUs each, healthy device-plugin
ConfigMaps); `inject KIND …` writes a fault the way MindCluster's components would (see testbed/inject.py);
`scenario FILE [--speed X]` applies a scenario file's steps at their times (testbed/scenario.py);
`clusterd` runs the ClusterD stand-in in the foreground (testbed/clusterd.py: ``cluster-info-*`` in
``--namespace``, default mindx-dl), until Ctrl-C. `kafka-console-consumer ARGS…` runs Apache Kafka's own console
consumer (kafka-tools, the broker's version) against the testbed's broker, e.g. ``kafka-console-consumer --topic
training.faults --from-beginning --property print.key=true``. The default folder is ``.testbed/`` in the current
directory.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from testbed import build
from testbed.cluster import VOLCANO_CONTROLLER_PROFILES, Testbed, TestbedError
from testbed.inject import (
    PUBLIC_ASSERTIONS,
    PUBLIC_FAULT_TYPES,
    SWITCH_LEVELS,
    ChipFault,
    InjectError,
    Injector,
    PublicFault,
    SwitchFault,
)
from testbed.rest import RestError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed", description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", default=".testbed", help="testbed folder (default: .testbed)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("build", "build or reuse the cached binaries and jars (etcd, Kubernetes, kwok, Volcano, Kafka, helm)"),
        ("down", "stop every process of the testbed in --dir"),
        ("status", "say which components of the testbed in --dir run, and where"),
        ("env", "print the shell exports (KUBECONFIG, FAULT_AGENT_*) that point tools and the agent at it"),
    ):
        sub.add_parser(name, parents=[common], help=text)
    up = sub.add_parser("up", parents=[common], help="start the testbed (built first when not cached) in --dir")
    up.add_argument(
        "--apf", action="store_true", help="kube-apiserver with API Priority and Fairness on (default: off)"
    )
    up.add_argument(
        "--volcano-controller",
        choices=sorted(VOLCANO_CONTROLLER_PROFILES),
        help="how Volcano's controller-manager runs: with Volcano's own defaults (volcano, the default for a new "
        "testbed), or with the arguments MindCluster's manifests give it (mindcluster: more client requests per "
        "second, more job workers); without it, a running testbed is used as it runs",
    )
    nodes = sub.add_parser("nodes", parents=[common], help="add kwok nodes like the guide's (8 NPUs each)")
    nodes.add_argument("count", type=int)
    nodes.add_argument("--prefix", default="node-")
    nodes.add_argument(
        "--gpu", action="store_true", help="GPU nodes instead (8 nvidia.com/gpu each, no device ConfigMaps)"
    )
    _inject_parser(sub.add_parser("inject", help="inject a fault"), common)
    sc = sub.add_parser("scenario", parents=[common], help="apply a scenario file's steps at their times")
    sc.add_argument("file")
    sc.add_argument("--speed", type=float, default=1.0, help="time factor (2 = twice as fast)")
    cd = sub.add_parser("clusterd", parents=[common], help="run the ClusterD stand-in (cluster-info-*) until Ctrl-C")
    cd.add_argument("--namespace", default="mindx-dl", help="where cluster-info-* go (default mindx-dl)")
    sub.add_parser(
        "kafka-console-consumer",
        parents=[common],
        help="Kafka's console consumer on the testbed's broker (every other argument goes to it)",
    )
    args, tool_args = parser.parse_known_args(argv)
    if tool_args and args.command != "kafka-console-consumer":
        parser.error(f"unrecognized arguments: {' '.join(tool_args)}")
    workdir = Path(args.dir)
    if workdir.exists() and not workdir.is_dir():
        print(f"testbed: --dir {workdir} exists and is not a directory", file=sys.stderr)
        return 2
    if args.command == "nodes" and not 1 <= args.count <= 10000:
        print(f"testbed: nodes needs a count from 1 to 10000, got {args.count}", file=sys.stderr)
        return 2
    if args.command == "inject" and args.kind == "pod-failed":
        namespace, _, pod = args.pod.partition("/")
        if not namespace or not pod or "/" in pod:
            print(f"testbed: pod-failed needs NAMESPACE/POD, got {args.pod!r}", file=sys.stderr)
            return 2
    problem = _name_problem(args)
    if problem is not None:
        print(f"testbed: {problem}", file=sys.stderr)
        return 2
    try:
        if args.command == "build":
            for name, path in build.build_all().items():
                print(f"{name}: {path}")
            return 0
        if args.command == "up":
            try:
                existing = Testbed.attach(workdir)
            except TestbedError:
                existing = None
            if existing is not None and all(s == "running" for s in existing.status().values()):
                if args.volcano_controller and existing.volcano_controller != args.volcano_controller:
                    print(
                        f"testbed: already running in {workdir} with --volcano-controller "
                        f"{existing.volcano_controller}; stop it first (python -m testbed down --dir {workdir})",
                        file=sys.stderr,
                    )
                    return 2
                print(f"testbed already running in {workdir}", file=sys.stderr)
                _print_env(existing)
                return 0
            if existing is not None:
                existing.down()
                shutil.rmtree(workdir, ignore_errors=True)
            tb = Testbed(
                workdir,
                die_with_parent=False,
                priority_and_fairness=args.apf,
                volcano_controller=args.volcano_controller or "volcano",
            )
            tb.up()
            _print_env(tb)
            return 0
        if args.command == "down" and not (workdir / "state.json").exists():
            print(f"testbed: nothing to stop in {workdir} (no testbed there)", file=sys.stderr)
            return 0
        tb = Testbed.attach(workdir)
        if args.command == "nodes":
            names = [f"{args.prefix}{i}" for i in range(args.count)]
            if args.gpu:
                Injector(tb.rest()).add_gpu_nodes(names)
            else:
                Injector(tb.rest()).add_nodes(names)
            print("\n".join(names))
            return 0
        if args.command == "inject":
            return _inject(Injector(tb.rest()), args)
        if args.command == "scenario":
            from agent.replay.scenario import ScenarioError, load_scenario
            from testbed.scenario import apply_scenario

            try:
                steps = load_scenario(Path(args.file).read_text(encoding="utf-8"), filename=args.file)
            except (OSError, ScenarioError) as e:
                print(f"testbed: {e}", file=sys.stderr)
                return 2
            apply_scenario(tb.rest(), steps, speed=args.speed)
            return 0
        if args.command == "kafka-console-consumer":
            tool = build.kafka_tool_argv(
                "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", tb.kafka_bootstrap
            )
            os.execv(tool[0], [*tool, *tool_args])
        if args.command == "clusterd":
            from testbed import clusterd

            try:
                return clusterd.main([f"--kubeconfig={tb.kubeconfig}", f"--namespace={args.namespace}"])
            except KeyboardInterrupt:
                return 0
        if args.command == "down":
            tb.down()
            shutil.rmtree(workdir, ignore_errors=True)
            print(f"testbed in {workdir} stopped", file=sys.stderr)
        elif args.command == "status":
            for name, state in tb.status().items():
                print(f"{name:24} {state}")
            return 0 if all(s == "running" for s in tb.status().values()) else 1
        else:
            _print_env(tb)
        return 0
    except (TestbedError, build.BuildError, RestError, InjectError) as e:
        print(f"testbed: {e}", file=sys.stderr)
        return 1


def _inject_parser(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    kinds = p.add_subparsers(dest="kind", required=True)
    real_add = kinds.add_parser

    def add_parser(name: str, **kw: Any) -> argparse.ArgumentParser:
        return real_add(name, parents=[common], **kw)

    kinds.add_parser = add_parser  # type: ignore[method-assign]
    chip = kinds.add_parser("chip", help="chip fault via the device-plugin ConfigMap (allocatable lowered)")
    chip.add_argument("node")
    chip.add_argument("chips", type=int, nargs="+", help="chip indexes 0-7")
    chip.add_argument("--code", default="80E3A201", help="8-hex-digit fault code (default 80E3A201)")
    chip.add_argument("--level", default="SeparateNPU")
    net = kinds.add_parser("network", help="parameter-plane network fault on chips (CardNetworkUnhealthy)")
    net.add_argument("node")
    net.add_argument("chips", type=int, nargs="+")
    net.add_argument("--code", default="81078603")
    net.add_argument("--level", default="PreSeparateNPU")
    kinds.add_parser("chip-clear", help="all chips of a node healthy again").add_argument("node")
    nf = kinds.add_parser("node", help="NodeD node fault")
    nf.add_argument("node")
    nf.add_argument("--level", default="SeparateFault", choices=["SeparateFault", "PreSeparateFault", "NotHandleFault"])
    kinds.add_parser("node-clear", help="NodeD ConfigMap deleted (node healthy)").add_argument("node")
    nr = kinds.add_parser("not-ready", help="node NotReady (kwok heartbeat off)")
    nr.add_argument("node")
    nr.add_argument("--status", default="Unknown", choices=["Unknown", "False"])
    kinds.add_parser("ready", help="node back to kwok, Ready again").add_argument("node")
    pf = kinds.add_parser("pod-failed", help="training process failure: NAMESPACE/POD turns Failed")
    pf.add_argument("pod", help="NAMESPACE/POD")
    pf.add_argument("--exit-code", type=int, default=1)
    pf.add_argument("--reason", default="Error")
    fl = kinds.add_parser("flap", help="fault and heal the same chip several times")
    fl.add_argument("node")
    fl.add_argument("chip", type=int)
    fl.add_argument("--times", type=int, default=3)
    fl.add_argument("--pause", type=float, default=1.0, help="seconds between writes")
    sw = kinds.add_parser("switch", help="A3 switch fault (SwitchInfoCfg of the device-plugin ConfigMap)")
    sw.add_argument("node")
    sw.add_argument("--code", default="[0x00f103b0,155907,na,na]", help="assembled switch fault code")
    sw.add_argument("--switch-chip", type=int, default=0)
    sw.add_argument("--port", type=int, default=3)
    sw.add_argument("--level", default="Separate", choices=list(SWITCH_LEVELS))
    kinds.add_parser("switch-clear", help="the node's switch healthy again").add_argument("node")
    pub = kinds.add_parser("public", help="public fault (a monitor's mc-consumer-publicfault ConfigMap)")
    pub.add_argument("node")
    pub.add_argument("chips", type=int, nargs="*", help="chip indexes 0-7 it hits (default 0)")
    pub.add_argument("--code", default="220001001", help="9-character public fault code")
    pub.add_argument("--type", default="NPU", choices=list(PUBLIC_FAULT_TYPES))
    pub.add_argument("--assertion", default="occur", choices=list(PUBLIC_ASSERTIONS))
    pub.add_argument("--fault-id", default="testbed-fault-0001")
    pub.add_argument("--name", default="testbed-public-fault", help="the ConfigMap's name")
    pub.add_argument("--namespace", default="mindx-dl", help="the ConfigMap's namespace")
    many = kinds.add_parser("many", help="chip fault on chip 0 of several nodes at once")
    many.add_argument("nodes", nargs="+", metavar="NODE", help="node names (not a count)")


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _name_problem(args: argparse.Namespace) -> str | None:
    """Why a Kubernetes name on the command line cannot be used, else None; checked before any request.

    Node, pod and ConfigMap names are DNS-1123 subdomains (≤ 253 characters), namespaces DNS-1123 labels
    (≤ 63), as the apiserver's validation requires; other text would fail in the HTTP client, not as an error.
    """
    subdomains: list[tuple[str, str]] = []
    labels: list[tuple[str, str]] = []
    if args.command == "nodes":
        subdomains.append(("--prefix", f"{args.prefix}0"))
    elif args.command == "clusterd":
        labels.append(("--namespace", args.namespace))
    elif args.command == "inject":
        if args.kind == "pod-failed":
            namespace, _, pod = args.pod.partition("/")
            labels.append(("pod namespace", namespace))
            subdomains.append(("pod name", pod))
        for node in getattr(args, "nodes", None) or [getattr(args, "node", None)]:
            if node is not None:
                subdomains.append(("node name", node))
        if args.kind == "public":
            subdomains.append(("--name", args.name))
            labels.append(("--namespace", args.namespace))
    for what, name in subdomains:
        if len(name) > 253 or _DNS1123_SUBDOMAIN.fullmatch(name) is None:
            return (
                f"{what} {name!r} is not a Kubernetes name (DNS-1123 subdomain: lower-case letters, digits, '-' "
                "and '.', alphanumeric at both ends, at most 253 characters)"
            )
    for what, name in labels:
        if len(name) > 63 or _DNS1123_LABEL.fullmatch(name) is None:
            return (
                f"{what} {name!r} is not a Kubernetes namespace (DNS-1123 label: lower-case letters, digits "
                "and '-', alphanumeric at both ends, at most 63 characters)"
            )
    return None


def _inject(inj: Injector, args: argparse.Namespace) -> int:
    kind = args.kind
    if kind in ("chip", "network"):
        fault_type = "CardUnhealthy" if kind == "chip" else "CardNetworkUnhealthy"
        inj.chip_fault(args.node, [ChipFault(c, (args.code,), args.level, fault_type) for c in args.chips])
    elif kind == "chip-clear":
        inj.chip_healthy(args.node)
    elif kind == "node":
        inj.node_fault(args.node, args.level)
    elif kind == "node-clear":
        inj.node_fault_cleared(args.node)
    elif kind == "not-ready":
        inj.node_not_ready(args.node, args.status)
    elif kind == "ready":
        inj.node_ready(args.node)
    elif kind == "pod-failed":
        namespace, _, pod = args.pod.partition("/")
        inj.pod_failed(namespace, pod, args.exit_code, args.reason)
    elif kind == "switch":
        inj.switch_fault(args.node, [SwitchFault(args.code, args.switch_chip, args.port, args.level)])
    elif kind == "switch-clear":
        inj.switch_healthy(args.node)
    elif kind == "public":
        fault = PublicFault(args.node, args.code, args.type, tuple(args.chips or [0]), args.assertion, args.fault_id)
        inj.public_fault([fault], name=args.name, namespace=args.namespace)
    elif kind == "flap":
        inj.flapping_chip(args.node, args.chip, args.times, pause_s=args.pause)
    elif kind == "many":
        for node in args.nodes:  # all or nothing: check every node before writing any fault
            inj.require_node(node)
        for node in args.nodes:
            inj.chip_fault(node, [ChipFault(0)])
    print(f"injected {kind}", file=sys.stderr)
    return 0


def _print_env(tb: Testbed) -> None:
    for key, value in tb.env().items():
        print(f"export {key}={value}")


if __name__ == "__main__":
    sys.exit(main())
