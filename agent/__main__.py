"""`python -m agent` is the same as the `fault-agent` command."""

import sys

from agent.cli import main

sys.exit(main())
