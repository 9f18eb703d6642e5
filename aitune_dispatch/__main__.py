"""``python -m aitune_dispatch``: the command line."""

import sys

from .cli import main

sys.exit(main())
