"""`python -m testbed build|up|down|status|env [--dir DIR]`: the local testbed for people.

`up` builds what is missing (cached), starts every component detached and prints the environment;
`env` prints ``KUBECONFIG=…`` and the Kafka bootstrap address for ``eval "$(python -m testbed env)"``;
`down` stops it. The default folder is ``.testbed/`` in the current directory.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from testbed import build
from testbed.cluster import Testbed, TestbedError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "up", "down", "status", "env"])
    parser.add_argument("--dir", default=".testbed", help="testbed folder (default: .testbed)")
    args = parser.parse_args(argv)
    workdir = Path(args.dir)
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
                print(f"testbed already running in {workdir}", file=sys.stderr)
                _print_env(existing)
                return 0
            if existing is not None:
                existing.down()
                shutil.rmtree(workdir, ignore_errors=True)
            tb = Testbed(workdir, die_with_parent=False)
            tb.up()
            _print_env(tb)
            return 0
        tb = Testbed.attach(workdir)
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
    except (TestbedError, build.BuildError) as e:
        print(f"testbed: {e}", file=sys.stderr)
        return 1


def _print_env(tb: Testbed) -> None:
    for key, value in tb.env().items():
        print(f"export {key}={value}")


if __name__ == "__main__":
    sys.exit(main())
