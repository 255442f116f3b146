"""``python -m firstlight.cli``: the same as the ``firstlight`` console script."""

import sys

from firstlight.cli import main

sys.exit(main())
