"""The files a ``type: command`` domain's program reads and writes: parameters files
(Dakota's standard format, byte for byte as Dakota 6.24 writes them, or JSON) and
results files (Dakota's standard format or JSON), one evaluation or a batch.

A domain with a search space writes each evaluation's active parameters by name with
their typed values, in the blocks of Dakota's kinds of variables (:data:`DAKOTA_KINDS`:
reals as continuous, integers as discrete integer, categories as discrete string,
integer or real sets), so that ``dakota.interfacing`` reads ints, floats and strings.

Reading a results file never raises: it gives, per evaluation, the values (objective,
measures, extra fields in order) or why they cannot be had (``fail``, a value that is
not a number, the wrong number of values), naming the file's offending line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

#: Width of Dakota's right-aligned integer fields (``{:>43d}``).
DAKOTA_WIDTH = 43
#: Dakota's variables' values: 21 spaces, then the value right-aligned in 22 characters
#: (a longer value, such as ``-1.000000000000000e-100`` or a long string, widens the line
#: instead of losing the spaces: what Dakota 6.24 writes, tests/data/dakota/).
DAKOTA_VALUE_INDENT, DAKOTA_VALUE_WIDTH = 21, 22
#: The objective's response descriptor in Dakota's parameters files (``ASV_1:obj_fn_1``).
DAKOTA_OBJECTIVE = "obj_fn_1"


#: Dakota's kinds of variables in the order its parameters files list them (a
#: continuous variable: ``%.15e``; a discrete integer range or set: an integer; a
#: discrete string set: its string; a discrete real set: ``%.15e``), as Dakota 6.24
#: writes a study of ``continuous_design``, ``discrete_design_range`` and
#: ``discrete_design_set`` ``integer``, ``string`` and ``real`` variables.
DAKOTA_KINDS = ("continuous", "integer_range", "integer_set", "string_set", "real_set")


@dataclass(frozen=True)
class Evaluation:
    """One evaluation as its parameters file describes it: ``values`` maps each active
    variable's name to its value (a float; with a space, an int, a str or a bool too)."""

    values: dict
    eval_id: int
    seed: int
    generation: int
    solution: int


def response_names(measure_dim: int, extra_fields: list[str]) -> list[str]:
    """The outputs a results file holds, in order: ``objective``, ``measure_1`` ...,
    then the extra fields."""
    return ["objective", *(f"measure_{j + 1}" for j in range(measure_dim)), *extra_fields]


def dakota_kind(entry: dict) -> str:
    """The Dakota kind (:data:`DAKOTA_KINDS`) of a search space's parameter: a real is
    continuous, an integer a discrete integer range; a categorical or ordinal parameter
    a discrete set of its choices' kind (integers, numbers, else strings)."""
    if entry["type"] in ("real", "integer"):
        return "continuous" if entry["type"] == "real" else "integer_range"
    choices = entry["choices"]
    if any(isinstance(choice, (bool, str)) for choice in choices):
        return "string_set"
    return "integer_set" if all(isinstance(c, int) for c in choices) else "real_set"


def dakota_kinds(entries: list[dict]) -> dict[str, str]:
    """A search space's parameters' Dakota kinds by name, in the order Dakota's
    parameters files list them (by kind, then as declared)."""
    kinds = {entry["name"]: dakota_kind(entry) for entry in entries}
    return dict(sorted(kinds.items(), key=lambda item: DAKOTA_KINDS.index(item[1])))


def dakota_string(value) -> str:
    """A value of a discrete string set as the parameters file writes it (a boolean as
    YAML writes it, ``true`` or ``false``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def dakota_problems(entries: list[dict]) -> list[str]:
    """What of a search space Dakota's parameters format cannot hold, one line each: a
    name that is not one word (a descriptor), a choice written as a string that is
    empty, starts or ends with a space or breaks a line."""
    problems = [
        f"parameter {entry['name']!r}: Dakota's parameters file needs a name without "
        "spaces (params_format: json takes any)"
        for entry in entries
        if entry["name"].split() != [entry["name"]]
    ]
    for entry in entries:
        if entry["type"] in ("categorical", "ordinal") and dakota_kind(entry) == "string_set":
            bad = [c for c in map(dakota_string, entry["choices"]) if c.strip() != c or not c]
            bad += [c for c in map(dakota_string, entry["choices"]) if len(c.splitlines()) > 1]
            if bad:
                problems.append(
                    f"parameter '{entry['name']}': choice {bad[0]!r} cannot be written in "
                    "Dakota's parameters file (empty, a space at an end, or a line break; "
                    "params_format: json takes it)"
                )
    return problems


def _dakota_line(kind: str, name: str, value) -> str:
    """A variable's line: 21 spaces, its value right-aligned in 22 characters (a longer
    one widens the line, a string's too), its name."""
    if kind in ("continuous", "real_set"):
        text = f"{float(value):.15e}"
    else:
        text = dakota_string(value) if kind == "string_set" else str(int(value))
    return f"{' ' * DAKOTA_VALUE_INDENT}{text:>{DAKOTA_VALUE_WIDTH}} {name}"


def dakota_parameters(
    evaluation: Evaluation, *, kinds: dict[str, str], responses: list[str]
) -> str:
    """One evaluation's parameters in Dakota's standard format (function values only,
    no analysis components, no metadata).

    Parameters
    ----------
    evaluation : Evaluation
        Its active variables' values by name.
    kinds : dict
        Every variable's Dakota kind (:data:`DAKOTA_KINDS`), in the order the file
        lists them (Dakota's: by kind, then as declared); a variable missing from
        ``evaluation.values`` (an inactive parameter) is left out.
    responses : list of str
        The outputs (:func:`response_names`).
    """
    width = DAKOTA_WIDTH
    labels = [DAKOTA_OBJECTIVE, *responses[1:]]
    written = [(kind, name) for name, kind in kinds.items() if name in evaluation.values]
    lines = [f"{len(written):>{width}d} variables"]
    lines += [_dakota_line(kind, name, evaluation.values[name]) for kind, name in written]
    lines.append(f"{len(labels):>{width}d} functions")
    lines += [f"{1:>{width}d} ASV_{i}:{label}" for i, label in enumerate(labels, 1)]
    continuous = [name for kind, name in written if kind == "continuous"]
    lines.append(f"{len(continuous):>{width}d} derivative_variables")
    lines += [f"{i:>{width}d} DVV_{i}:{name}" for i, name in enumerate(continuous, 1)]
    lines.append(f"{0:>{width}d} analysis_components")
    lines.append(f"{evaluation.eval_id:>{width}d} eval_id")
    lines.append(f"{0:>{width}d} metadata")
    return "\n".join(lines) + "\n"


def json_parameters(evaluation: Evaluation, *, run: str) -> dict:
    """One evaluation's parameters as a JSON object (variables by name with their typed
    values, inactive parameters absent; ids, seed)."""
    return {
        "variables": dict(evaluation.values),
        "eval_id": evaluation.eval_id,
        "seed": evaluation.seed,
        "generation": evaluation.generation,
        "solution": evaluation.solution,
        "run": run,
    }


def parameters_text(
    evaluations: list[Evaluation],
    *,
    params_format: str,
    kinds: dict[str, str],
    responses: list[str],
    run: str,
    batch: bool,
) -> str:
    """The text of a parameters file: one evaluation, or a batch (Dakota: the blocks
    one after the other, as Dakota's batch mode writes them; JSON: ``{"evaluations":
    [...]}``); ``kinds`` as :func:`dakota_parameters` takes them."""
    if params_format == "json":
        objects = [json_parameters(e, run=run) for e in evaluations]
        document = {"evaluations": objects} if batch else objects[0]
        return json.dumps(document, indent=1) + "\n"
    return "".join(dakota_parameters(e, kinds=kinds, responses=responses) for e in evaluations)


def read_results(
    text: str,
    *,
    results_format: str,
    responses: list[str],
    measure_dim: int,
    count: int,
    batch: bool,
) -> list[tuple[float, ...] | str] | str:
    """The values of every evaluation of a results file, or why not.

    Returns
    -------
    list or str
        One entry per evaluation: its values in the order of ``responses``, or a
        message (a ``fail``, a bad line); a string when the whole file is unusable (it
        names the line).
    """
    if results_format == "json":
        if text.lstrip().lower().startswith("fail"):  # Dakota's word, not JSON
            return [f"the file says {_short(text.strip().splitlines()[0])}"] * count
        return _json_results(
            text, responses=responses, measure_dim=measure_dim, count=count, batch=batch
        )
    blocks = _dakota_blocks(text) if batch else [list(enumerate(text.splitlines(), 1))]
    if len(blocks) != count:
        return f"it holds {len(blocks)} evaluations separated by '#' lines, expected {count}"
    return [_dakota_values(block, responses) for block in blocks]


def _dakota_blocks(text: str) -> list[list[tuple[int, str]]]:
    """A batch's results: blocks separated by lines that begin with ``#``."""
    blocks: list[list[tuple[int, str]]] = [[]]
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            blocks.append([])
        else:
            blocks[-1].append((number, line))
    if blocks and not any(line.strip() for _, line in blocks[-1]) and len(blocks) > 1:
        blocks.pop()  # a '#' line after the last evaluation
    return blocks


def _dakota_values(block: list[tuple[int, str]], responses: list[str]) -> tuple | str:
    """One evaluation's values: one per line, ``<value> [label]``."""
    lines = [(number, line.strip()) for number, line in block if line.strip()]
    if lines and lines[0][1].lower().startswith("fail"):
        return f"line {lines[0][0]} says {_short(lines[0][1])}"
    values = []
    for position, (number, line) in enumerate(lines):
        if position >= len(responses):
            return (
                f"line {number} '{_short(line)}': more values than the {len(responses)} "
                f"expected ({', '.join(responses)})"
            )
        token, _, label = line.partition(" ")
        label = label.strip()
        try:
            value = float(token)
        except ValueError:
            return f"line {number} '{_short(line)}': '{_short(token)}' is not a number"
        if not math.isfinite(value):
            return f"line {number} '{_short(line)}': {token} is not finite"
        if label in responses and label != responses[position]:
            return (
                f"line {number} '{_short(line)}': labelled {label}, but value {position + 1} "
                f"is {responses[position]} (order: {', '.join(responses)})"
            )
        values.append(value)
    if len(values) < len(responses):
        return f"{len(values)} values, expected {len(responses)} ({', '.join(responses)})" + (
            f" after line {lines[-1][0]}" if lines else ""
        )
    return tuple(values)


def _json_results(text: str, *, responses: list[str], measure_dim: int, count: int, batch: bool):
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        return f"line {error.lineno}: not JSON ({error.msg})"
    if batch and isinstance(document, dict) and "evaluations" in document:
        document = document["evaluations"]
    entries = document if batch else [document]
    if not isinstance(entries, list) or len(entries) != count:
        held = len(entries) if isinstance(entries, list) else type(entries).__name__
        return f"it holds {held} evaluations, expected a list of {count}"
    return [
        _json_values(entry, responses, measure_dim, position)
        for position, entry in enumerate(entries)
    ]


def _json_values(entry, responses: list[str], measure_dim: int, position: int) -> tuple | str:
    where = f"evaluation {position} of the file" if position else "the file"
    if entry is None:
        return f"{where} says fail"
    if isinstance(entry, str) and entry.lower().startswith("fail"):
        return f"{where} says {_short(entry)}"
    if not isinstance(entry, dict):
        return f"{where}: {_short(json.dumps(entry))} is not an object"
    measures = entry.get("measures", [])
    if not isinstance(measures, list) or len(measures) != measure_dim:
        shown = _short(json.dumps(measures))
        return f"{where}: 'measures' is {shown}, expected a list of {measure_dim} numbers"
    extras = responses[1 + measure_dim :]
    raw = [entry.get("objective"), *measures, *(entry.get(name) for name in extras)]
    values = []
    for name, value in zip(responses, raw, strict=True):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{where}: '{name}' is {_short(json.dumps(value))}, not a number"
        if not math.isfinite(value):
            return f"{where}: '{name}' is {value}, not finite"
        values.append(float(value))
    return tuple(values)


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
