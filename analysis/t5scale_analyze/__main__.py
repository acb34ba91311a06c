"""`python -m t5scale_analyze RESULTS_DIR ...`: the t5scale-analyze command."""

import sys

from .cli import main

sys.exit(main())
