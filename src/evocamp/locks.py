"""Stale Snakemake locks: a killed ``snakemake`` leaves its lock files behind.

Snakemake refuses to start while ``.snakemake/locks`` holds locks and does not
check whether their owner is alive. After a ``kill -9`` (or a lost login node)
the locks are stale; rerunning the same command must resume the campaign, so the
workflow removes locks when no other Snakemake process works in this directory.
"""

from __future__ import annotations

import os
import shutil
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
