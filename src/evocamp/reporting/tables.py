"""Table writing of the campaign comparison: one number format, one CSV writer, one
Markdown, one LaTeX and one HTML table writer.

Every table of a campaign's ``tables/`` folder is written with these functions: the
final metrics (:mod:`evocamp.reporting.comparison`), the tests
(:mod:`~evocamp.reporting.significance`), the aggregates
(:mod:`~evocamp.reporting.aggregates`) and the expected running times
(:mod:`~evocamp.reporting.runtime_to_target`) choose their rows, columns and captions;
this module shows the values. CSV cells keep every digit (rereading gives the same
numbers); Markdown and LaTeX show numbers with 4 significant digits (:func:`number`).
"""

from __future__ import annotations

import html

import numpy as np

#: The mark of a value not significantly different from the best one.
DAGGER = "\u2020"


def number(value: float) -> str:
    """A number as the readable tables show it: 4 significant digits."""
    return f"{value:.4g}"


def interval(values: tuple[float, float, float]) -> str:
    """``value [low, high]`` (a mean or other statistic and its confidence interval)."""
    value, low, high = values
    return f"{number(value)} [{number(low)}, {number(high)}]"


def csv_cell(value) -> str:
    """A CSV cell: empty for ``None``, ``true``/``false``, integers as they are, floats
    with every digit (``repr``), so that rereading gives the same numbers."""
    if value is None:
        return ""
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return repr(float(value))
    return str(value)


def markdown_cell(value) -> str:
    """A readable cell: ``-`` for ``None``, ``yes``/``no``, integers as they are, other
    numbers with :func:`number`, text as it is."""
    if value is None:
        return "-"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return number(value)
    return str(value)


def csv_text(header: list[str] | tuple[str, ...], rows: list[list]) -> str:
    """CSV of plain cells (names without commas, numbers; :func:`csv_cell`)."""
    lines = [",".join(header)] + [",".join(csv_cell(value) for value in row) for row in rows]
    return "\n".join(lines) + "\n"


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table (no trailing newline); cells by :func:`markdown_cell`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(markdown_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_text(*parts: str) -> str:
    """A Markdown file: captions, headings and tables, a blank line between each."""
    return "\n\n".join(parts) + "\n"


def html_table(header: list[str], rows: list[list], *, caption: str) -> str:
    """An HTML ``<table>`` with a ``<caption>``: header and caption escaped, cells by
    :func:`markdown_cell`, already HTML (e.g. a ``<strong>`` mean); one line per row."""
    lines = [
        "<table>",
        f"<caption>{html.escape(caption, quote=False)}</caption>",
        "<thead><tr>"
        + "".join(f"<th>{html.escape(title, quote=False)}</th>" for title in header)
        + "</tr></thead>",
        "<tbody>",
    ]
    lines += [
        "<tr>" + "".join(f"<td>{markdown_cell(value)}</td>" for value in row) + "</tr>"
        for row in rows
    ]
    lines += ["</tbody>", "</table>"]
    return "\n".join(lines) + "\n"


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters of names (backslash, ``_``, ``&``)
    escaped."""
    return text.replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("&", "\\&")


def latex_table(
    header: list[str], rows: list[list[str]], *, columns: str, caption: str | None = None
) -> str:
    """A booktabs LaTeX tabular of cells already in LaTeX.

    Parameters
    ----------
    header : list of str
        Column titles.
    rows : list of list of str
        Cells of each row.
    columns : str
        The tabular's column alignments (``llrr``).
    caption : str, optional
        Plain text for the caption, written as a comment line above the table
        (escaped; :data:`DAGGER` as ``\\dag{}``).
    """
    lines = [
        "% Requires \\usepackage{booktabs}.",
        *(["% Caption: " + latex_escape(caption).replace(DAGGER, "\\dag{}")] if caption else []),
        f"\\begin{{tabular}}{{{columns}}}",
        "\\toprule",
        " & ".join(header) + " \\\\",
        "\\midrule",
    ]
    lines += [" & ".join(cells) + " \\\\" for cells in rows]
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"
