#!/usr/bin/env python3
"""A Dakota analysis driver (``rosenbrock_driver.py params results``) for
tests/workflow/test_dakota.py: runs unchanged under Dakota's fork interface and under an
evocamp command domain.

Reads Dakota's standard parameters file and answers as many functions as it asks
(``<m> functions``), in this order: the Rosenbrock function of the variables (to be
minimised), the first two variables, their Euclidean norm; one labelled value a line
(labels from the ASV lines, as Dakota names its responses).
"""

import math
import sys
from pathlib import Path

lines = Path(sys.argv[1]).read_text().splitlines()
count = int(lines[0].split()[0])
x = [float(line.split()[0]) for line in lines[1 : 1 + count]]
functions = int(lines[1 + count].split()[0])
labels = [line.split(":", 1)[1] for line in lines[2 + count : 2 + count + functions]]
rosenbrock = sum(100 * (b - a * a) ** 2 + (1 - a) ** 2 for a, b in zip(x, x[1:], strict=False))
values = [rosenbrock, x[0], x[1], math.sqrt(sum(v * v for v in x))][:functions]
text = "".join(f"{value!r} {label}\n" for value, label in zip(values, labels, strict=True))
Path(sys.argv[2]).write_text(text)
