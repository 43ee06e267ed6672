"""Work done in a supervised child process: a crash or a hang is not the caller's, and
neither is any process it starts.

:func:`supervised` forks the calling process (cheap: everything it imported is shared)
and lets the child compute ``task(0)``, ``task(1)``, ... in order, streaming each
result back over a pipe as soon as it is done. The parent yields them in order. When
the child dies before an item came back (a signal such as ``SIGSEGV`` or ``SIGKILL``
from the out-of-memory killer, or ``os._exit``), or an item runs past its time limit,
the parent yields an :class:`Ended` naming the item in flight and stops; the caller
decides whether to start again from that item or the next. A crash is what the
child's own process did, its exit status or signal (``waitpid``), seen the moment it
ends (a ``pidfd``; where the kernel has none, polled every :data:`POLL_SECONDS`):
never inferred from its result pipe, which a helper it forked may hold open.

**The whole process tree.** The child is the leader of a process group of its own;
whatever it starts (programs through :mod:`subprocess` without a new session, forked
helpers, their children: an ``srun`` or ``mpirun`` and what they start) is in that
group. After a timeout, a crash, a retry, a discard or any exit of the caller's loop
the group is ended as a whole: ``SIGTERM`` to every process of it, up to
:data:`KILL_GRACE_SECONDS` for them to end (``srun`` and ``mpirun`` pass it on to
their tasks), then ``SIGKILL`` to whatever is left (those that ignore ``SIGTERM``).
What a child that delivered every result left running is ended the same way when the
next supervised call starts, or when the caller's process ends.

**When the caller dies** (``scancel``'s ``SIGTERM``, a killed Snakemake's job, a lost
Dask worker: ``SIGKILL``) nothing runs in it any more. A *guardian* does it then: a
tiny process (a Python interpreter started with ``-S -I``, a few MB; one per calling
process, started with its first supervised call, in a session of its own so that a
signal to the caller's group does not reach it) that holds the read end of a pipe
from the caller, learns over it which groups are running (a few bytes per child), and
on end of file (the caller is gone, however it died) ends them all: ``SIGTERM``,
:data:`KILL_GRACE_SECONDS`, ``SIGKILL``; then the processes that carry their children's
markers (:mod:`evocamp.base.process_table`: those that left the trees).
``PR_SET_CHILD_SUBREAPER`` was the alternative, and it cannot do this: a subreaper
adopts orphans only while it lives, and here it is the caller that dies; a guardian
per child would double the forks. The child itself also dies with its caller
(``PR_SET_PDEATHSIG``), should the guardian be gone too. Only a process that leaves
the group on purpose (``setsid``, a daemon) and drops the marker from its environment
escapes.

``os.fork`` is used directly, not :mod:`multiprocessing`: Dask workers are daemonic
processes, which may not have multiprocessing children.

What the child writes to its standard output and error (an evaluation's prints) comes
to the parent through a second pipe and goes to the parent's standard error (a job's
log), bounded: the first :data:`OUTPUT_HEAD` and the last :data:`OUTPUT_TAIL` bytes of
each child, with one line saying how many bytes between them were dropped.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import os
import pickle
import secrets
import select
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from evocamp.base import process_table
from evocamp.base.process_table import MARKER_VARIABLE, descendant_groups, kill_marked

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
    task: Callable[[int], object],
    count: int,
    *,
    limits: list[float | None] | None = None,
    environment: dict[str, str] | None = None,
) -> Iterator[object]:
    """Yield ``task(k)`` for ``k`` in ``0..count-1``, each computed in a forked child
    that leads a process group of its own, ended as a whole when it is done.

    Parameters
    ----------
    task : callable
        Computes item ``k`` (its result must pickle); it should catch its own
        exceptions and return them as values: one escaping ends the child with status 70.
    count : int
        Number of items.
    limits : list of float or None, optional
        Seconds item ``k`` may take (``None``: no limit).
    environment : dict, optional
        Variables set in the child (and so in whatever it starts), not in the caller.

    Yields
    ------
    object
        The results in order; then, if the child died or overran, one :class:`Ended`
        (and nothing more).
    """
    _end_finished()
    guardian = _guardian()
    read_end, write_end = os.pipe()
    output_read, output_write = os.pipe()
    parent = os.getpid()
    marker = secrets.token_hex(8)  # names the child's processes, never what it computes
    _flush_standard_streams()  # or the child would write the parent's pending output again
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, which never returns
        os.setpgid(0, 0)  # its own process group, which whatever it starts joins
        os.close(read_end)
        os.close(output_read)
        _die_with(parent)
        for standard in (1, 2):
            os.dup2(output_write, standard)
        os.close(output_write)
        os.environ.update(environment or {}, **{MARKER_VARIABLE: marker})
        _child(task, count, write_end)
    with contextlib.suppress(OSError):  # set by both, whichever runs first (it may be gone)
        os.setpgid(pid, pid)
    if guardian is not None:
        guardian.watch(pid, marker)
    os.close(write_end)
    os.close(output_write)
    group = _Group(pid, marker)
    output = _Output(output_read)
    finished = False
    try:
        for index in range(count):
            limit = limits[index] if limits else None
            deadline = None if limit is None else time.monotonic() + limit
            message = _receive(read_end, deadline, output, group)
            if message is _OVERRAN:
                yield Ended(index, timed_out=limit)
                return
            if message is _ENDED:
                yield group.ended(index)
                return
            yield message
        finished = True
    finally:
        os.close(read_end)
        if finished:
            _FINISHED.append(group)  # it is ending: its group is ended later, not waited for now
        else:
            group.end()
        output.close()


#: Seconds the processes of an evaluation's group have between ``SIGTERM`` and
#: ``SIGKILL`` (a timeout, a crash, a retry, a discard, the caller's death).
KILL_GRACE_SECONDS = 2.0

#: Seconds between checks of whether a child ended, where the kernel has no ``pidfd``
#: (Linux before 5.3), and between checks of whether a group ended after ``SIGTERM``.
POLL_SECONDS = 0.01

#: Children that sent every result and are ending; :func:`_end_finished` reaps them
#: and ends what they left running (waiting for a large process to end would cost the
#: caller ~10 ms).
_FINISHED: list[_Group] = []


def _end_finished() -> None:
    with _LOCK:
        done = [group for group in _FINISHED if group.reap(block=False)]
        for group in done:
            _FINISHED.remove(group)
    for group in done:
        group.end()


def _signal_group(group: int, number: int) -> bool:
    """Send signal ``number`` to every process of ``group``; whether any is left."""
    try:
        os.killpg(group, number)
    except ProcessLookupError:
        return False
    except PermissionError:  # only processes of another user left (a setuid program)
        return True
    return True


class _Group:
    """A supervised child and its process group (the same id).

    While the child is not reaped (a zombie at worst) its id cannot be given to
    another process, nor, while any process of the group lives, the group's id: a
    signal to the group reaches this evaluation's processes and no others.
    """

    def __init__(self, pid: int, marker: str) -> None:
        self.pid = pid
        self.marker = marker
        self.status: int | None = None
        self.reaped = False
        try:  # readable the moment the child ends
            self.watch: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):  # Linux before 5.3: polled instead
            self.watch = None

    def exited(self) -> bool:
        """Whether the child has ended (it is not reaped here)."""
        if self.reaped:
            return True
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # SIGCHLD ignored: reaped already
            return True

    def reap(self, *, block: bool = True) -> bool:
        """Reap the child (waiting for it to end when ``block``); whether it is reaped."""
        if not self.reaped:
            try:
                done, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
            except ChildProcessError:  # SIGCHLD ignored: reaped already, status lost
                done, status = self.pid, None
            if not done:
                return False
            self.reaped, self.status = True, status
            if self.watch is not None:
                os.close(self.watch)
                self.watch = None
        return True

    def ended(self, index: int) -> Ended:
        """How the child ended (it has), item ``index`` in flight."""
        self.reap()
        if self.status is None:
            return Ended(index)
        if os.WIFSIGNALED(self.status):
            return Ended(index, signal=os.WTERMSIG(self.status))
        return Ended(index, status=os.WEXITSTATUS(self.status))

    def end(self, *, grace: float = KILL_GRACE_SECONDS) -> None:
        """End every process of the group, and of the groups its running child's
        descendants lead (an MPI launcher puts each task in a group of its own):
        ``SIGTERM``, up to ``grace`` seconds for them to end, ``SIGKILL`` to those
        left; reap the child; then, if anything was left to end, ``SIGKILL`` what
        carries its marker still (processes that left its tree: an orphan re-parented
        away, tasks ``srun`` had Slurm start); unwatch the group."""
        if not (self.reaped and not _signal_group(self.pid, 0)):
            others = descendant_groups(self.pid) if not self.exited() else set()
            for group in (self.pid, *others):
                _signal_group(group, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while not (
                self.reap(block=False)
                and not any(_signal_group(group, 0) for group in (self.pid, *others))
            ):
                if time.monotonic() >= deadline:
                    for group in (self.pid, *others):
                        _signal_group(group, signal.SIGKILL)
                    self.reap()
                    break
                time.sleep(POLL_SECONDS)
            kill_marked(self.marker)  # a /proc scan: only when something was left to end
        if _GUARDIAN is not None:
            _GUARDIAN.unwatch(self.pid)


#: The guardian's program: reads ``+<group> <marker>`` and ``-<group>`` lines from the
#: descriptor ``argv[1]``; at end of file ends every group it was told of, then the
#: processes that carry their markers (``argv[3]``: :mod:`evocamp.base.process_table`'s
#: file, loaded by path: an isolated interpreter has no ``evocamp`` to import).
_GUARDIAN_PROGRAM = """\
# evocamp: ends the evaluations' process groups when the process that started them dies
import importlib.util, os, signal, sys, time
source, grace = int(sys.argv[1]), float(sys.argv[2])
loader = importlib.util.spec_from_file_location("evocamp_process_table", sys.argv[3])
table = importlib.util.module_from_spec(loader)
loader.loader.exec_module(table)
os.chdir("/")  # holds no folder of the step's
os.closerange(3, source)
os.closerange(source + 1, 1 << 16)
for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(number, signal.SIG_IGN)
try:  # woken by each line, it does not preempt the caller; its full share when it acts
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
except (AttributeError, OSError):
    pass
groups, pending = {}, b""
while data := os.read(source, 1 << 16):
    *lines, pending = (pending + data).split(b"\\n")
    for line in lines:
        group, *marker = line[1:].decode().split()
        if line[:1] == b"+":
            groups[int(group)] = marker[0]
        else:
            groups.pop(int(group), None)
markers, alive = list(groups.values()), set(groups)
def signal_all(number):
    for group in list(alive):
        try:
            os.killpg(group, number)
        except OSError:
            alive.discard(group)
signal_all(signal.SIGTERM)
deadline = time.monotonic() + grace
while alive and time.monotonic() < deadline:
    time.sleep(0.02)
    signal_all(0)
signal_all(signal.SIGKILL)
table.kill_marked(*markers)  # what left the groups' trees (an orphan re-parented away)
"""


class _Guardian:
    """This process's guardian (see the module's docstring): a pipe to it and the
    groups it watches."""

    def __init__(self) -> None:
        self.watched: dict[int, str] = {}
        self.pid, self.channel = _start_guardian()

    def watch(self, group: int, marker: str) -> None:
        """Have the guardian end ``group`` and the processes carrying ``marker``
        should this process die."""
        with _LOCK:
            self.watched[group] = marker
            self._send(f"+{group} {marker}\n")

    def unwatch(self, group: int) -> None:
        """``group`` is ended (or empty): the guardian forgets it."""
        with _LOCK:
            if self.watched.pop(group, None) is not None:
                self._send(f"-{group}\n")

    def _send(self, line: str) -> None:
        try:
            os.write(self.channel, line.encode())
        except BrokenPipeError:  # it died (killed by hand?): a new one watches them all
            os.close(self.channel)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, os.WNOHANG)
            self.pid, self.channel = _start_guardian()
            lines = "".join(f"+{group} {marker}\n" for group, marker in self.watched.items())
            _write_all(self.channel, lines.encode())


def _start_guardian() -> tuple[int, int]:
    """Start a guardian in a session of its own; its pid and the pipe's write end."""
    read_end, write_end = os.pipe()
    try:
        os.set_inheritable(read_end, True)
        pid = os.posix_spawn(
            sys.executable,
            [
                sys.executable,
                "-S",
                "-I",
                "-c",
                _GUARDIAN_PROGRAM,
                str(read_end),
                str(KILL_GRACE_SECONDS),
                process_table.__file__,
            ],
            os.environ,
            file_actions=[(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)],
            setsid=True,
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return pid, write_end


_GUARDIAN: _Guardian | None = None
#: Held while the guardian starts, its groups change or finished children are taken
#: (supervised calls may come from several threads: a Dask worker's).
_LOCK = threading.Lock()
#: Set when a guardian could not be started (said once; evaluations run without).
_NO_GUARDIAN: list[str] = []


def _guardian() -> _Guardian | None:
    """This process's guardian, started on first use (``None`` if it cannot start:
    said once, and evaluations run without)."""
    global _GUARDIAN
    with _LOCK:
        if _GUARDIAN is None and not _NO_GUARDIAN:
            try:
                _GUARDIAN = _Guardian()
            except OSError as error:
                _NO_GUARDIAN.append(str(error))
                _pass_on(
                    f"evocamp: warning: no guardian process ({error}): processes an "
                    "evaluation starts may outlive this process if it is killed\n"
                )
        return _GUARDIAN


def _forget_in_child() -> None:
    """In any forked child: the guardian and the children are the parent's (the
    child holds no end of the guardian's pipe; its own starts on its first call)."""
    global _GUARDIAN, _LOCK
    _LOCK = threading.Lock()  # another thread may have held it at the fork
    if _GUARDIAN is not None:
        with contextlib.suppress(OSError):
            os.close(_GUARDIAN.channel)
        _GUARDIAN = None
    _FINISHED.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _die_with(parent: int) -> None:  # pragma: no cover - in the child
    """Have the kernel kill this child when its parent dies (Linux ``PR_SET_PDEATHSIG``):
    a hung evaluation must not outlive a shard job killed by Slurm or a lost Dask
    worker, holding its output pipes open (the guardian ends the rest of its group)."""
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


_ENDED = object()
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


def _receive(descriptor: int, deadline: float | None, output: _Output, group: _Group):
    """One message, ``_ENDED`` when the child ended without sending it (whoever holds
    the pipe) or ``_OVERRAN`` when the deadline passed first; the child's output is
    passed on meanwhile."""
    header = _read_exactly(descriptor, _HEADER.size, deadline, output, group)
    if not isinstance(header, bytes):
        return header
    body = _read_exactly(descriptor, _HEADER.unpack(header)[0], deadline, output, group)
    return pickle.loads(body) if isinstance(body, bytes) else body


def _read_exactly(
    descriptor: int, size: int, deadline: float | None, output: _Output, group: _Group
):
    parts, missing = [], size
    while missing:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        watch = [] if group.watch is None else [group.watch]
        if not watch:
            wait = POLL_SECONDS if wait is None else min(wait, POLL_SECONDS)
        ready, _, _ = select.select([descriptor, *output.sources(), *watch], [], [], wait)
        if output.descriptor in ready:
            output.read()
        if descriptor in ready:
            part = os.read(descriptor, min(missing, 1 << 20))
            if not part:
                return _ENDED
            parts.append(part)
            missing -= len(part)
            continue
        if (group.watch in ready if watch else group.exited()) and not select.select(
            [descriptor], [], [], 0
        )[0]:  # ended, and nothing it sent before is left in the pipe
            return _ENDED
        if deadline is not None and time.monotonic() >= deadline:
            return _OVERRAN
    return b"".join(parts)
