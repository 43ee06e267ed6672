"""Job logs of a run folded into one file per window (few files on shared clusters).

Every Snakemake job writes its own log (``gen_<g>/evaluate_<s>.log``, ``tell.log``,
``segment.log``; ``keep_<g>.log``). When a window of generations is kept, its logs are
appended to ``window_<g>.log`` and removed: a finished run keeps one log file per kept
checkpoint instead of one per job. A job that failed never reaches a kept window, so
its log stays whole where the README says until a rerun succeeds.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from evocamp.storage import replaced_atomically

GENERATION_FOLDER = "gen_"
KEEP_LOG = "keep_{generation:06d}.log"
WINDOW_LOG = "window_{generation:06d}.log"


def _numbered(logs: Path, pattern: str, *, up_to: int) -> list[tuple[int, Path]]:
    """Entries of ``logs`` named ``<prefix><number>[.log]`` with number <= ``up_to``."""
    prefix = pattern.split("{", 1)[0]
    found = []
    for path in logs.glob(f"{prefix}*"):
        number = path.name.removeprefix(prefix).removesuffix(".log")
        if number.isdigit() and int(number) <= up_to:
            found.append((int(number), path))
    return sorted(found)


def generation_folders(logs: Path, *, up_to: int) -> list[Path]:
    """Per-generation log folders ``gen_<g>`` with ``g <= up_to``, oldest first."""
    return [path for _, path in _numbered(logs, GENERATION_FOLDER, up_to=up_to) if path.is_dir()]


def window_logs(logs: Path) -> list[Path]:
    """The folded window logs of a run, oldest first."""
    return [path for _, path in _numbered(logs, WINDOW_LOG, up_to=sys.maxsize)]


def fold_logs(logs: str | Path, *, up_to: int, own: str | Path | None = None) -> Path | None:
    """Append the job logs of generations ``<= up_to`` to ``window_<up_to>.log`` and
    remove them.

    The window file is replaced atomically (its old content, then the new logs) before
    any log is removed, so a kill at any instant loses nothing; a rerun after a kill
    between the two folds the logs left again (at worst a log appears twice).

    Parameters
    ----------
    logs : str or Path
        The run's log folder (``results/<campaign>/logs/<algorithm>/<domain>/seed<k>``).
    up_to : int
        Last generation of the window.
    own : str or Path, optional
        The calling job's own log (still being written): left for the next fold.

    Returns
    -------
    Path or None
        The window log, or ``None`` when there was nothing to fold.
    """
    logs = Path(logs)
    own = Path(own).resolve() if own is not None else None
    folders = generation_folders(logs, up_to=up_to)
    files = []
    for folder in folders:
        files += [(f"{folder.name}/{log.name}", log) for log in sorted(folder.iterdir())]
    files += [(path.name, path) for _, path in _numbered(logs, KEEP_LOG, up_to=up_to)]
    files = [(name, path) for name, path in files if path.resolve() != own]
    if not files:
        return None
    target = logs / WINDOW_LOG.format(generation=up_to)
    parts = [target.read_text(errors="replace")] if target.exists() else []
    for name, path in files:
        text = path.read_text(errors="replace")
        parts.append(f"==> {name} <==\n{text}" + ("" if text.endswith("\n") or not text else "\n"))
    with replaced_atomically(target) as temporary:
        temporary.write_text("".join(parts))
    for _, path in files:
        path.unlink(missing_ok=True)
    for folder in folders:
        if not any(folder.iterdir()):
            shutil.rmtree(folder, ignore_errors=True)
    return target


def job_log(logs: str | Path, name: str) -> str:
    """The text of one job's log, whether still on its own or folded into a window log.

    Parameters
    ----------
    logs : str or Path
        The run's log folder.
    name : str
        The log's path below it, e.g. ``"gen_000012/tell.log"`` or ``"keep_000010.log"``.

    Raises
    ------
    FileNotFoundError
        When no such log exists in either form.
    """
    logs = Path(logs)
    if (logs / name).is_file():
        return (logs / name).read_text(errors="replace")
    header = f"==> {name} <==\n"
    for window in window_logs(logs):
        text = window.read_text(errors="replace")
        if header in text:
            section = text.rsplit(header, 1)[1]
            return section.split("\n==> ", 1)[0] + "\n"
    raise FileNotFoundError(f"no log {name} in {logs} (neither on its own nor folded)")
