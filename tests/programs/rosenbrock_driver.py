#!/usr/bin/env python3
"""A Dakota analysis driver (``rosenbrock_driver.py params results``) for
tests/workflow/test_dakota.py: runs unchanged under Dakota's fork interface and under an
evocamp command domain.

Reads Dakota's standard parameters file; writes the Rosenbrock function of the
variables (to be minimised), labelled ``obj_fn_1``
(Dakota's own name for it; Dakota 6.24 ignores results labels).
"""

import sys
from pathlib import Path

lines = Path(sys.argv[1]).read_text().splitlines()
count = int(lines[0].split()[0])
x = [float(line.split()[0]) for line in lines[1 : 1 + count]]
rosenbrock = sum(100 * (b - a * a) ** 2 + (1 - a) ** 2 for a, b in zip(x, x[1:], strict=False))
Path(sys.argv[2]).write_text(f"{rosenbrock!r} obj_fn_1\n")
