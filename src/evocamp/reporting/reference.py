"""The reference tables of ``docs/configuration.md``, generated from the catalogue.

``python -m evocamp.reporting.reference docs/configuration.md`` rewrites every block
between ``<!-- BEGIN generated: NAME -->`` and ``<!-- END generated: NAME -->``; a test
fails when the file is not what this module generates, so the documentation of types,
keys and defaults cannot drift from the catalogue (:mod:`evocamp.catalogue`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from evocamp.catalogue.algorithms import ALGORITHMS, FAMILIES
from evocamp.catalogue.domains import DOMAINS
from evocamp.catalogue.entries import Derived

BLOCK = re.compile(
    r"(<!-- BEGIN generated: (?P<name>[a-z_]+) -->\n)(?P<body>.*?)"
    r"(<!-- END generated: (?P=name) -->)",
    re.DOTALL,
)


def _value(value) -> str:
    if isinstance(value, Derived):
        return value.text
    return f"`{value}`"


def algorithms_table() -> str:
    """One row per algorithm type: family, what it is, keys with defaults."""
    lines = [
        "| type | family | what it is | keys (default) | reference |",
        "| --- | --- | --- | --- | --- |",
    ]
    for family in FAMILIES:
        for entry in ALGORITHMS.values():
            if entry.family.name != family:
                continue
            keys = [f"`{name}` ({_value(value)})" for name, value in entry.defaults.items()]
            keys += [f"`{name}` (required)" for name in entry.required]
            keys += [f"`{name}`" for name in entry.optional]
            keys += [
                f"`archive.{name}` ({_value(value)})"
                for name, value in entry.archive_defaults.items()
            ]
            notes = []
            if entry.needs_measures:
                notes.append("needs a domain with measures")
            if entry.needs_bounds:
                notes.append("needs `bounds`")
            if entry.shards_in_spec:
                notes.append("`shards` is part of the algorithm")
            if entry.async_refusal is None and entry.cls is None and entry.recipe is None:
                notes.append("runs in `mode: async` with `ask_async` and `tell_async`")
            elif entry.async_refusal is None:
                notes.append("runs in `mode: async`")
            if not entry.grid_archive:
                notes.append("`archive.cells`, `archive.cvt_samples` instead of `archive.dims`")
            summary = entry.summary + (f" ({'; '.join(notes)})" if notes else "")
            lines.append(
                f"| `{entry.name}` | {FAMILIES[family].title} | {summary} | "
                f"{', '.join(keys) or '-'} | {entry.reference or '-'} |"
            )
    return "\n".join(lines) + "\n"


def domains_table() -> str:
    """One row per built-in domain: what it is, dimension, measures, bounds, offset, best
    objective."""
    lines = [
        "| type | what it is | solution_dim | measures | bounds | QD score offset | "
        "best objective (CQD) | params (default) | extra fields |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for entry in DOMAINS.values():
        if entry.space is not None:
            dim = f"its space: {len(entry.space)} parameters"
        elif entry.fixed_dim is not None:
            dim = f"fixed: {entry.fixed_dim(dict(entry.params))}" + (
                " (with the default params)" if entry.params else ""
            )
        else:
            dim = "`solution_dim` (default 20)"
        bounds = "-" if entry.bounds is None else f"[{entry.bounds[0]:.6g}, {entry.bounds[1]:.6g}]"
        measures = str(entry.measure_dim) if entry.measure_dim else "none"
        params = ", ".join(f"`{name}` (`{value}`)" for name, value in entry.params.items())
        extra = ", ".join(f"`{name}`" for name in entry.extra_fields)
        if entry.minimised:
            extra += " (the minimised value)"
        if callable(entry.objective_max):
            best = "per instance"
        else:
            best = "-" if entry.objective_max is None else f"{entry.objective_max:.6g}"
        offset = entry.score_offset(dict(entry.params))
        lines.append(
            f"| `{entry.name}` | {entry.summary} | {dim} | {measures} | {bounds} | "
            f"{offset:.6g} | {best} | {params or '-'} | {extra or '-'} |"
        )
    return "\n".join(lines) + "\n"


GENERATED = {"algorithms": algorithms_table, "domains": domains_table}


def render(text: str, *, blocks: dict | None = None) -> str:
    """``text`` with every generated block replaced by what its generator gives now.

    Parameters
    ----------
    text : str
        Markdown with blocks between ``<!-- BEGIN generated: NAME -->`` and
        ``<!-- END generated: NAME -->``.
    blocks : dict, optional
        ``NAME: function`` returning each block's text; default: the tables of
        ``docs/configuration.md`` (``GENERATED``). ``docs/cli.md``'s block is
        :mod:`evocamp.cli_reference`'s.
    """
    blocks = GENERATED if blocks is None else blocks

    def replace(match: re.Match) -> str:
        name = match.group("name")
        if name not in blocks:
            raise KeyError(f"no generated block named {name!r}")
        return match.group(1) + blocks[name]() + match.group(4)

    return BLOCK.sub(replace, text)


def main(argv: list[str] | None = None) -> None:
    """Rewrite the generated blocks of the given Markdown files in place."""
    for name in argv if argv is not None else sys.argv[1:]:
        path = Path(name)
        path.write_text(render(path.read_text()))


if __name__ == "__main__":
    main()
