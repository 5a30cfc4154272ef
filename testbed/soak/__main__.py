"""``python -m testbed.soak``: see :mod:`testbed.soak.cli`."""

import sys

from testbed.soak.cli import main

sys.exit(main())
