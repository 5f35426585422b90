"""``python -m invalidation_contracts.cli``: the command line, as the console script runs it."""

import sys

from .dispatch import main

sys.exit(main())
