"""Work done in a supervised child process: a crash or a hang is not the caller's.

:func:`supervised` forks the calling process (cheap: everything it imported is shared)
and lets the child compute ``task(0)``, ``task(1)``, ... in order, streaming each
result back over a pipe as soon as it is done. The parent yields them in order. When
the child dies before an item came back (a signal such as ``SIGSEGV`` or ``SIGKILL``
from the out-of-memory killer, or ``os._exit``), or an item runs past its time limit
(the parent kills the child with ``SIGKILL``: certain even for C code that never
returns to Python), the parent yields an :class:`Ended` naming the item in flight and
stops; the caller decides whether to start again from that item or the next.

``os.fork`` is used directly, not :mod:`multiprocessing`: Dask workers are daemonic
processes, which may not have multiprocessing children. The child dies with its
parent (``PR_SET_PDEATHSIG``): a hung evaluation does not outlive a killed job.

What the child writes to its standard output and error (an evaluation's prints) comes
to the parent through a second pipe and goes to the parent's standard error (a job's
log), bounded: the first :data:`OUTPUT_HEAD` and the last :data:`OUTPUT_TAIL` bytes of
each child, with one line saying how many bytes between them were dropped.
"""

from __future__ import annotations

import codecs
import ctypes
import os
import pickle
import select
import signal
import struct
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_HEADER = struct.Struct("!Q")


@dataclass(frozen=True)
class Ended:
    """The child ended before item ``index`` came back: killed by signal ``signal``,
    exited with ``status``, or killed by the parent after ``timed_out`` seconds."""

    index: int
    signal: int | None = None
    status: int | None = None
    timed_out: float | None = None

    def reason(self) -> str:
        """``killed by signal 11 (SIGSEGV)``, ``exited with status 3`` or ``ran past ...``."""
        if self.timed_out is not None:
            return f"ran past its time limit ({self.timed_out:g} s) and was killed"
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = "unknown signal"
            return f"killed by signal {self.signal} ({name})"
        if self.status is None:
            return "ended its process (no exit status: SIGCHLD is ignored)"
        return f"ended its process with exit status {self.status}"


def supervised(
    task: Callable[[int], object], count: int, *, limits: list[float | None] | None = None
) -> Iterator[object]:
    """Yield ``task(k)`` for ``k`` in ``0..count-1``, each computed in a forked child.

    Parameters
    ----------
    task : callable
        Computes item ``k`` (its result must pickle); it should catch its own
        exceptions and return them as values: one escaping ends the child with status 70.
    count : int
        Number of items.
    limits : list of float or None, optional
        Seconds item ``k`` may take (``None``: no limit).

    Yields
    ------
    object
        The results in order; then, if the child died or overran, one :class:`Ended`
        (and nothing more).
    """
    _reap_finished()
    read_end, write_end = os.pipe()
    output_read, output_write = os.pipe()
    parent = os.getpid()
    _flush_standard_streams()  # or the child would write the parent's pending output again
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, which never returns
        os.close(read_end)
        os.close(output_read)
        _die_with(parent)
        for standard in (1, 2):
            os.dup2(output_write, standard)
        os.close(output_write)
        _child(task, count, write_end)
    os.close(write_end)
    os.close(output_write)
    output = _Output(output_read)
    running = True
    try:
        for index in range(count):
            limit = limits[index] if limits else None
            deadline = None if limit is None else time.monotonic() + limit
            message = _receive(read_end, deadline, output)
            if message is _OVERRAN:
                yield Ended(index, timed_out=limit)
                return
            if message is _CLOSED:
                running = False
                try:
                    status = os.waitpid(pid, 0)[1]
                except ChildProcessError:  # SIGCHLD ignored: reaped already, status lost
                    yield Ended(index)
                    return
                if os.WIFSIGNALED(status):
                    yield Ended(index, signal=os.WTERMSIG(status))
                else:
                    yield Ended(index, status=os.WEXITSTATUS(status))
                return
            yield message
        running = False
        _FINISHED.append(pid)  # it is ending: reaped later, not waited for now
    finally:
        os.close(read_end)
        if running:
            _kill(pid)
        output.close()


#: Children that sent every result and are ending; :func:`_reap_finished` reaps them
#: (waiting for a large process to end would cost the caller ~10 ms).
_FINISHED: list[int] = []


def _reap_finished() -> None:
    for pid in list(_FINISHED):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _FINISHED.remove(pid)


def _die_with(parent: int) -> None:  # pragma: no cover - in the child
    """Have the kernel kill this child when its parent dies (Linux ``PR_SET_PDEATHSIG``):
    a hung evaluation must not outlive a shard job killed by Slurm or a lost Dask
    worker, holding its output pipes open."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's SIGKILL only
        return
    if os.getppid() != parent:  # the parent died before the call
        os._exit(0)


_PR_SET_PDEATHSIG = 1


def _child(task, count: int, write_end: int) -> None:  # pragma: no cover - in the child
    status = 0
    try:
        for index in range(count):
            data = pickle.dumps(task(index), protocol=pickle.HIGHEST_PROTOCOL)
            _flush_standard_streams()  # the item's output reaches the parent before it
            _write_all(write_end, _HEADER.pack(len(data)) + data)
    except BaseException:  # noqa: BLE001 - the parent reports the exit status
        status = 70
    finally:
        _flush_standard_streams()  # what the evaluation printed (os._exit does not)
        os._exit(status)


def _flush_standard_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]


_CLOSED = object()
_OVERRAN = object()

#: Bytes of a child's output passed on from its beginning and kept from its end.
OUTPUT_HEAD = OUTPUT_TAIL = 32 * 1024


class _Output:
    """A child's standard output and error (one pipe), passed on to this process's
    standard error: the first :data:`OUTPUT_HEAD` bytes as they come, the last
    :data:`OUTPUT_TAIL` when the child is done, and between them one line saying how
    many bytes were dropped."""

    def __init__(self, descriptor: int) -> None:
        self.descriptor = descriptor
        self.open = True
        self.passed = 0
        self.tail = bytearray()
        self.dropped = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def sources(self) -> list[int]:
        """The pipe while it may still bring output."""
        return [self.descriptor] if self.open else []

    def read(self) -> None:
        """Take what the pipe holds (it is ready)."""
        data = os.read(self.descriptor, 1 << 16)
        if not data:
            self.open = False
            return
        room = max(0, OUTPUT_HEAD - self.passed)
        if room:
            _pass_on(self.decoder.decode(data[:room]))
            self.passed += min(room, len(data))
        self.tail += data[room:]
        excess = len(self.tail) - OUTPUT_TAIL
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def close(self) -> None:
        """Take what is left without waiting (a process the child started may hold the
        pipe open), pass the tail on and close the pipe."""
        while self.open and select.select([self.descriptor], [], [], 0)[0]:
            self.read()
        os.close(self.descriptor)
        if self.dropped:
            _pass_on(
                f"\n[evocamp: {self.dropped} bytes of the evaluation's output dropped here; "
                f"the first {OUTPUT_HEAD} and the last {OUTPUT_TAIL} are kept]\n"
            )
            self.decoder.reset()  # the tail does not continue the head
        _pass_on(self.decoder.decode(bytes(self.tail), final=True))


def _pass_on(text: str) -> None:
    if text:
        sys.stderr.write(text)
        sys.stderr.flush()


def _receive(descriptor: int, deadline: float | None, output: _Output):
    """One message, ``_CLOSED`` when the child closed the pipe (it ended) or
    ``_OVERRAN`` when the deadline passed first; the child's output is passed on
    meanwhile."""
    header = _read_exactly(descriptor, _HEADER.size, deadline, output)
    if not isinstance(header, bytes):
        return header
    body = _read_exactly(descriptor, _HEADER.unpack(header)[0], deadline, output)
    return pickle.loads(body) if isinstance(body, bytes) else body


def _read_exactly(descriptor: int, size: int, deadline: float | None, output: _Output):
    parts, missing = [], size
    while missing:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([descriptor, *output.sources()], [], [], wait)
        if output.descriptor in ready:
            output.read()
        if descriptor not in ready:
            if not ready or (deadline is not None and time.monotonic() >= deadline):
                return _OVERRAN
            continue
        part = os.read(descriptor, min(missing, 1 << 20))
        if not part:
            return _CLOSED
        parts.append(part)
        missing -= len(part)
    return b"".join(parts)


def _kill(pid: int) -> None:
    """End the child (done, overran or no longer wanted) and reap it."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:  # SIGCHLD ignored: reaped already
        pass
