"""A test analysis driver: ``python sphere_driver.py [--results json] PARAMS RESULTS``.

It reads a parameters file in Dakota's standard format (one evaluation or a batch of
them one after the other) or in JSON, and writes a results file (Dakota's format, a
batch's evaluations separated by ``#`` lines, or JSON): a sphere to minimise shifted
by 0.2, plus a millionth of the evaluation seed's last three digits (so a wrong seed
changes the archive), and two measures (the sums of each half of the variables). The
seed comes from the JSON file, else from ``EVOCAMP_SEED``.

Seeds choose failures: with ``FAIL_EVERY=k``, an evaluation whose seed is divisible by
``k`` writes ``fail``; with ``CRASH_EVERY=k``, the driver exits with status 3 when the
(first) evaluation's seed is divisible by ``k``. ``CRASH_ONCE=<folder>`` makes it crash
the first time only for each evaluation (a marker file per eval_id).
"""

import json
import os
import sys
from pathlib import Path


def dakota_evaluations(text):
    lines = [line.split() for line in text.splitlines() if line.strip()]
    evaluations, at = [], 0
    while at < len(lines):
        count = int(lines[at][0])
        values = [float(words[0]) for words in lines[at + 1 : at + 1 + count]]
        at += 1 + count
        while lines[at][1] != "eval_id":
            at += 1
        eval_id = int(lines[at][0])
        at += 2  # eval_id, metadata
        seed = int(os.environ.get("EVOCAMP_SEED", "0"))
        evaluations.append({"values": values, "seed": seed, "eval_id": eval_id})
    return evaluations


def json_evaluations(text):
    document = json.loads(text)
    entries = document.get("evaluations", [document])
    return [
        {"values": list(e["variables"].values()), "seed": e["seed"], "eval_id": e["eval_id"]}
        for e in entries
    ]


def evaluate(values, seed):
    objective = sum((x - 0.2) ** 2 for x in values) + (seed % 1000) * 1e-6
    half = len(values) // 2
    return objective, [sum(values[:half]), sum(values[half:])]


def main(argv):
    as_json = argv[:2] == ["--results", "json"]
    params, results = argv[-2:]
    text = Path(params).read_text()
    evaluations = json_evaluations(text) if text.startswith("{") else dakota_evaluations(text)
    batch = text.startswith("{") and "evaluations" in json.loads(text)
    fail_every = int(os.environ.get("FAIL_EVERY", "0"))
    crash_every = int(os.environ.get("CRASH_EVERY", "0"))
    first = evaluations[0]
    if crash_every and first["seed"] % crash_every == 0:
        once = os.environ.get("CRASH_ONCE")
        marker = Path(once, str(first["eval_id"])) if once else None
        if marker is None or not marker.exists():
            if marker is not None:
                marker.touch()
            print("driver: crashing on purpose", file=sys.stderr)
            return 3
    outputs = []
    for evaluation in evaluations:
        if fail_every and evaluation["seed"] % fail_every == 0:
            outputs.append(None)
        else:
            outputs.append(evaluate(evaluation["values"], evaluation["seed"]))
    if as_json:
        document = [
            "fail" if out is None else {"objective": out[0], "measures": out[1]} for out in outputs
        ]
        Path(results).write_text(json.dumps(document if batch else document[0]))
        return 0
    blocks = [
        "fail\n"
        if out is None
        else f"{out[0]!r} obj_fn\n{out[1][0]!r} measure_1\n{out[1][1]!r} measure_2\n"
        for out in outputs
    ]
    Path(results).write_text("#\n".join(blocks))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
