"""Crash-safe file writes, private folders and whether a folder can be made.

Every file evocamp writes appears at its final path only when complete: it is written
to a temporary file in the same folder, fsynced and renamed over the final name, so a
kill at any instant (of the process or of the node) leaves either the old file or the
new one. The folder is fsynced after the rename too (the new file is on disk when the
write returns), except for working files that a rerun recomputes bit for bit (shard
results, light working states: ``durable=False``): after a crash of the node such a
file may be absent (never torn), and the rerun makes it again; every later write that
depends on it is ordered after it by the filesystem's journal. This saves one journal
commit per file, which is most of what a generation writes on a parallel filesystem.
A write that fails for lack of space (or quota) leaves the old file as it was,
removes the temporary one and raises :class:`~evocamp.base.errors.DiskFullError`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path

from evocamp.base.errors import DiskFullError

#: errno values that mean "no room for the file": a full device or an exceeded quota
#: (inode and byte quotas of shared cluster filesystems).
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _fsync_path(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def disk_full_error(path: Path, error: OSError) -> DiskFullError:
    """The :class:`DiskFullError` for a write of ``path`` that failed with ``error``."""
    if path.exists():
        kept = f"{path} keeps its previous content"
    else:
        kept = f"{path} was not created"
    reason = "disk quota exceeded" if error.errno == errno.EDQUOT else "no space left on device"
    return DiskFullError(
        f"{reason} while writing {path}; nothing already written was lost ({kept}, "
        "every earlier checkpoint and result is intact): free space (or raise your quota) "
        "and rerun the same command to continue"
    )


@contextlib.contextmanager
def replaced_atomically(path: str | Path, *, durable: bool = True):
    """Yield a temporary path beside ``path``; when the block succeeds, the temporary
    file is fsynced and renamed over ``path`` (and the folder fsynced when ``durable``:
    leave that off only for files a rerun recomputes bit for bit).

    On an exception the temporary file is removed and ``path`` is left as it was, so
    a reader (or a kill at any instant) sees either the old file or the new one.

    Raises
    ------
    DiskFullError
        When the device is full or the quota exceeded (the message names ``path``).
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield temporary
        _fsync_path(temporary)
        os.replace(temporary, path)
        if durable:
            _fsync_path(path.parent)
    except OSError as error:
        if error.errno in NO_SPACE:
            raise disk_full_error(path, error) from None
        raise
    finally:
        temporary.unlink(missing_ok=True)


def atomic_copy(source: str | Path, destination: str | Path) -> None:
    """Copy a file so that ``destination`` is either absent/old or complete: a hard
    link where the filesystem allows one (no bytes written; files are never modified in
    place, only replaced), else a copy."""
    with replaced_atomically(destination) as temporary:
        try:
            os.link(source, temporary)
        except OSError as error:
            if error.errno in NO_SPACE:
                raise
            shutil.copyfile(source, temporary)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write a text file atomically (temporary file, fsync, rename)."""
    with replaced_atomically(path) as temporary:
        temporary.write_text(text)


def private_folder(folder: Path) -> Path | None:
    """``folder``, created if needed, when only this user can use it (else ``None``)."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return folder


def unwritable_reason(folder: str | Path) -> str | None:
    """Why this process could not make files in ``folder``, or ``None`` when it can.

    It makes (and removes at once) an empty folder in ``folder``, or, when ``folder``
    is missing, in its nearest existing ancestor (where ``folder`` would be made): asking
    ``os.access`` is not enough, as root may write anywhere by permissions, and pseudo
    filesystems such as ``/proc`` refuse folders their permissions allow.

    Parameters
    ----------
    folder : str or Path
        The folder (relative to the working directory).

    Returns
    -------
    str or None
        E.g. ``"no folder can be made in /proc (No such file or directory)"``.
    """
    ancestor = Path(os.path.abspath(folder))
    while not os.path.exists(ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not os.path.isdir(ancestor):
        return f"{ancestor} is a file, not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".evocamp-probe-", dir=ancestor))
    except OSError as error:
        return f"no folder can be made in {ancestor} ({error.strerror})"
    return None
