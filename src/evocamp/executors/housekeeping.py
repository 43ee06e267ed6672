"""Housekeeping around Snakemake: the one module that knows Snakemake's internals.

Each workaround exists because of something Snakemake does (or does not do) with
long generation chains on shared clusters:

- **Stale locks.** A killed ``snakemake`` leaves ``.snakemake/locks`` behind, and
  Snakemake refuses to start while it holds locks, without checking whether their
  owner is alive. Rerunning the same command must resume the campaign, so the
  workflow removes locks when no other Snakemake process works in the directory
  (:func:`release_stale_locks`).
- **Jobs left running.** A killed ``snakemake`` does not end its local jobs (their
  shells are its children, not in a group it kills): they run on beside the rerun,
  which starts the same jobs again. The workflow ends them first, when no other
  Snakemake works in the directory (:func:`end_jobs_left_running`).
- **Metadata records.** Snakemake keeps one small file per output it ever made in
  ``.snakemake/metadata`` and never removes them, also not for ``temp()`` outputs it
  deletes itself: a long run would leave one per shard and generation (inode quotas).
  :func:`forget_records_below` removes the records of deleted working files.
- **Working files.** Snakemake keeps ``temp()`` files until no checkpoint job is
  pending, which in a windowed chain means until the end of the run; a kept checkpoint
  makes every older working file unnecessary, so :func:`prune_work_files` removes them.
- **Job logs.** Snakemake wants one log file per job (``log:``); a long run would
  leave thousands. When a window is kept, :func:`fold_logs` appends its job logs to one
  ``window_<g>.log`` and removes them; :func:`job_log` finds a log in either form.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from base64 import urlsafe_b64decode, urlsafe_b64encode
from pathlib import Path

from evocamp.base.files import replaced_atomically
from evocamp.loop.step_settings import STEP_VARIABLE
from evocamp.model.layout import GENERATION_LOGS, KEEP_LOG, SHARD_FOLDER, WINDOW_LOG, WORK_STATE

# --- stale locks ------------------------------------------------------------------


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


#: The variable the workflow's shell prefix exports to every job (common.smk, the step
#: settings): a step process that has it was started by Snakemake, not by hand.
JOB_VARIABLE = STEP_VARIABLE

#: Seconds a job left running has to end after SIGTERM before it gets SIGKILL.
END_GRACE_SECONDS = 5.0


def _is_step(command: list[str]) -> bool:
    """Whether ``command`` is a step of evocamp's (``python -m evocamp <step>``)."""
    return (
        len(command) > 3
        and Path(command[0]).name.startswith("python")
        and command[1:3] == ["-m", "evocamp"]
    )


def jobs_left_running(workdir: str | Path) -> list:
    """The evocamp step jobs (``psutil.Process``) a killed Snakemake left running in
    ``workdir``: step processes started by the workflow (they have
    :data:`JOB_VARIABLE`) whose working directory is ``workdir``, when no Snakemake
    other than this one (and its ancestors) works there; else none."""
    import psutil

    workdir = Path(workdir).resolve()
    mine = {os.getpid()}
    mine.update(parent.pid for parent in psutil.Process().parents())
    steps = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        command = process.info["cmdline"] or []
        if process.info["pid"] in mine or not (_is_snakemake(command) or _is_step(command)):
            continue
        try:
            if Path(process.cwd()).resolve() != workdir:
                continue
            if _is_snakemake(command):
                return []
            if JOB_VARIABLE in process.environ():
                steps.append(process)
        except (psutil.Error, OSError):
            continue
    return steps


def end_jobs_left_running(workdir: str | Path, *, grace: float = END_GRACE_SECONDS) -> list[str]:
    """End the step jobs a killed Snakemake left running in ``workdir``
    (:func:`jobs_left_running`): SIGTERM, then SIGKILL for those still running after
    ``grace`` seconds; returns them as ``<pid> (<step>)``, for one line in the log.

    The rerun starts the same jobs again (Snakemake marked them incomplete), and a job
    writes its output atomically, so ending one loses only its unfinished work (a
    Dask or warm-started step's own children die with it).
    """
    import psutil

    jobs = jobs_left_running(workdir)
    ended = []
    for job in jobs:
        try:
            ended.append(f"{job.pid} ({job.cmdline()[3]})")
            job.terminate()
        except psutil.Error:
            continue
    deadline = time.monotonic() + grace
    while jobs and time.monotonic() < deadline:
        jobs = [job for job in jobs if _running(job)]
        time.sleep(0.05)
    for job in jobs:
        with contextlib.suppress(psutil.Error):
            job.kill()
    return ended


def _running(process) -> bool:
    """Whether ``process`` runs (an orphan's zombie, unreaped, does not)."""
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
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


# --- working files -----------------------------------------------------------------


def prune_work_files(work: Path, *, up_to: int) -> int:
    """Delete working states and shard folders of generations ``<= up_to``.

    Snakemake keeps ``temp()`` files until no checkpoint job is pending, which in a
    windowed chain means until the end of the run; a kept checkpoint makes every
    older working file unnecessary, so it removes them itself, with Snakemake's
    metadata records of every working file of those generations (also of those
    Snakemake removed itself); ``work`` is named as Snakemake names it.

    Returns
    -------
    int
        Number of files removed.
    """

    def in_window(relative: str) -> bool:
        name = relative.split("/", 1)[0]
        number = WORK_STATE.number_of(name)
        number = SHARD_FOLDER.number_of(name) if number is None else number
        return number is not None and number <= up_to

    removed = 0
    for path in WORK_STATE.in_folder(work, up_to=up_to) + SHARD_FOLDER.in_folder(work, up_to=up_to):
        if path.is_dir():
            removed += sum(1 for _ in path.iterdir())
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
            removed += 1
    forget_records_below(work, select=in_window)
    return removed


# --- job logs --------------------------------------------------------------------


def generation_folders(logs: Path, *, up_to: int | None = None) -> list[Path]:
    """Per-generation log folders ``gen_<g>`` (with ``g <= up_to``), oldest first."""
    return [path for path in GENERATION_LOGS.in_folder(logs, up_to=up_to) if path.is_dir()]


def window_logs(logs: Path) -> list[Path]:
    """The folded window logs of a run, oldest first."""
    return WINDOW_LOG.in_folder(logs)


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
    files += [(path.name, path) for path in KEEP_LOG.in_folder(logs, up_to=up_to)]
    files = [(name, path) for name, path in files if path.resolve() != own]
    if not files:
        return None
    target = logs / WINDOW_LOG.name(up_to)
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
