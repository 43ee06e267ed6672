"""``python -m evocamp``: the same entry point as the ``evocamp`` command."""

import sys

from evocamp.cli import main

sys.exit(main())
