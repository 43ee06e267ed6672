"""Snakemake's own bookkeeping in ``.snakemake/``: stale locks and file records.

Stale locks: a killed ``snakemake`` leaves its lock files behind. Snakemake refuses
to start while ``.snakemake/locks`` holds locks and does not check whether their
owner is alive. After a ``kill -9`` (or a lost login node) the locks are stale;
rerunning the same command must resume the campaign, so the workflow removes locks
when no other Snakemake process works in this directory.
"""

from __future__ import annotations

import os
import shutil
from base64 import urlsafe_b64decode, urlsafe_b64encode
from pathlib import Path


def _is_snakemake(command: list[str]) -> bool:
    if not command:
        return False
    program = Path(command[0]).name
    if program == "snakemake":
        return True
    if program.startswith("python") and len(command) > 1:
        script = command[1:3]
        return Path(command[1]).name == "snakemake" or script == ["-m", "snakemake"]
    return False


def other_snakemake_running(workdir: str | Path) -> bool:
    """Whether a Snakemake process other than this one (and its ancestors) has
    ``workdir`` as its working directory."""
    import psutil

    workdir = Path(workdir).resolve()
    mine = {os.getpid()}
    mine.update(parent.pid for parent in psutil.Process().parents())
    for process in psutil.process_iter(["pid", "cmdline", "cwd"]):
        info = process.info
        if info["pid"] in mine or not _is_snakemake(info["cmdline"] or []):
            continue
        if info["cwd"] and Path(info["cwd"]).resolve() == workdir:
            return True
    return False


def release_stale_locks(workdir: str | Path) -> bool:
    """Remove ``.snakemake/locks`` when no other Snakemake runs in ``workdir``.

    Returns
    -------
    bool
        True when stale locks were removed.
    """
    locks = Path(workdir) / ".snakemake" / "locks"
    if not locks.is_dir() or not any(locks.iterdir()):
        return False
    if other_snakemake_running(workdir):
        return False
    shutil.rmtree(locks, ignore_errors=True)
    return True


def forget_records_below(folder: str | Path, *, workdir: str | Path = ".", select) -> int:
    """Remove Snakemake's metadata records of deleted files below ``folder``.

    Snakemake keeps one small file per output it ever made in
    ``.snakemake/metadata`` (named after the output's path, base64-encoded) and
    never removes them, also not when it deletes a ``temp()`` output itself: a long
    run would leave one per shard and generation. A record whose file no longer
    exists is never read (Snakemake writes a new one if the file is made again).

    Parameters
    ----------
    folder : str or Path
        Folder as Snakemake names it (relative to ``workdir``, or absolute).
    workdir : str or Path
        Snakemake's working directory.
    select : callable
        Called with a recorded file's path relative to ``folder`` (a ``str``); records
        of files it selects are removed when the file does not exist.

    Returns
    -------
    int
        Number of records removed.
    """
    records = Path(workdir) / ".snakemake" / "metadata"
    prefix = f"{Path(folder)}/"
    if not records.is_dir():
        return 0
    # Base64 of paths with a common prefix shares the encoding of its whole 3-byte groups.
    whole = len(prefix.encode()) // 3 * 3
    encoded = urlsafe_b64encode(prefix.encode()[:whole]).decode()
    removed = 0
    for record in records.glob(f"{encoded}*"):
        try:
            path = urlsafe_b64decode(record.name).decode()
        except (ValueError, UnicodeDecodeError):
            continue  # a long id split into folders, or not Snakemake's
        if not path.startswith(prefix) or not select(path[len(prefix) :]):
            continue
        if not (Path(workdir) / path).exists() and record.is_file():
            record.unlink(missing_ok=True)
            removed += 1
    return removed
