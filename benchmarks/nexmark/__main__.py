"""``python -m benchmarks.nexmark``: see ``benchmarks.nexmark.run``."""

import sys

from benchmarks.nexmark.run import main

sys.exit(main())
