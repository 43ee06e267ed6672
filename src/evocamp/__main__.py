"""``python -m evocamp``: the same entry point as the ``evocamp`` command.

The pipeline's rules call this form: steps of the generation loop run in a warm
process when one is available (see :mod:`evocamp.warmstart`), else here.
"""

import sys

from evocamp.warmstart import run_warm

status = run_warm(sys.argv[1:])
if status is None:
    from evocamp.cli import main

    status = main()
sys.exit(status)
