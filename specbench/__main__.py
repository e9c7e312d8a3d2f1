"""``python -m specbench``: the same command as ``specbench``."""

import sys

from specbench.harness.cli import main

sys.exit(main())
