"""A test analysis driver over the mixed search space of ``tests/campaigns.py``
(``MIXED_SPACE``): ``python space_driver.py PARAMS RESULTS [WORD ...]``.

It reads the parameters file (Dakota's format with ``dakota.interfacing`` when that is
installed, else with :func:`read_dakota`, which types values by the same rule: an
``int`` when the value reads as one, else a ``float``, else the string; JSON with
``json``), checks that every parameter has its type and that ``momentum`` is there
exactly when ``optimizer`` is ``sgd`` (else it exits with status 3 naming the
parameter), writes ``seen.json`` in its work directory (the values read, their types'
names and the extra command words) and a results file in Dakota's format: an objective
to maximise, plus a millionth of the last three digits of ``EVOCAMP_SEED``.
"""

import importlib.util
import json
import math
import os
import sys
from pathlib import Path

TYPES = {"lr": float, "layers": int, "optimizer": str, "momentum": float, "width": int}


def typed(text: str):
    """A value of a Dakota parameters file as dakota.interfacing types it."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def read_dakota(path) -> dict:
    """The variables of a Dakota parameters file (one evaluation) by name, typed."""
    lines = Path(path).read_text().splitlines()
    count = int(lines[0].split()[0])
    pairs = [line.strip().rsplit(" ", 1) for line in lines[1 : 1 + count]]
    return {name: typed(value.strip()) for value, name in pairs}


def read_parameters(path) -> dict:
    text = Path(path).read_text()
    if text.startswith("{"):
        return json.loads(text)["variables"]
    if importlib.util.find_spec("dakota") and importlib.util.find_spec("dakota.interfacing"):
        import dakota.interfacing as di

        parameters, _ = di.read_parameters_file(str(path), results_file=di.UNNAMED)
        return dict(parameters.items())
    return read_dakota(path)


def problems(values: dict) -> list[str]:
    found = [
        f"{name} is {value!r} ({type(value).__name__}), not a {TYPES[name].__name__}"
        for name, value in values.items()
        if type(value) is not TYPES[name]
    ]
    if ("momentum" in values) != (values.get("optimizer") == "sgd"):
        found.append(f"momentum present: {'momentum' in values}, optimizer {values['optimizer']}")
    return found


def main(argv):
    params, results, *words = argv
    values = read_parameters(params)
    wrong = problems(values)
    if wrong:
        print("space driver: " + "; ".join(wrong), file=sys.stderr)
        return 3
    seen = {"values": values, "types": {k: type(v).__name__ for k, v in values.items()}}
    Path("seen.json").write_text(json.dumps({**seen, "words": words}))
    seed = int(os.environ.get("EVOCAMP_SEED", "0"))
    objective = (
        -((math.log10(values["lr"]) + 3) ** 2)
        - 0.1 * (values["layers"] - 3) ** 2
        + values.get("momentum", 0.3)
        + values["width"] / 64
        + (seed % 1000) * 1e-6
    )
    Path(results).write_text(f"{objective!r} objective\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
