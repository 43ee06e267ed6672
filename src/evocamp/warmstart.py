"""Warm start: pipeline steps run in a fork of a process that has already imported
pyribs, h5py and numpy.

A cold ``python -m evocamp tell`` spends about 1.4 s importing pyribs (it pulls in
scikit-learn, scipy, pandas and numba), once per generation on the critical path.
A warm server per user and code version keeps those modules imported and forks one
child per request; the child takes the caller's working directory, environment,
``sys.path``, arguments and standard streams (passed over a Unix socket), runs the
step exactly as the cold command would and reports its exit status. Nothing else
is shared: every step reads and writes its files as before, so results are
bitwise identical with and without warm start.

The server starts on first use (the step that finds none runs cold), lives in its
own session and exits after :data:`IDLE_SECONDS` without requests. A client that
is killed (e.g. a cancelled Snakemake job) takes its child with it. Inside Slurm
jobs (``SLURM_JOB_ID`` set) steps always run cold, within the job's allocation.
``EVOCAMP_WARM_START=0`` turns warm start off.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import sys
import time
from importlib.util import find_spec
from pathlib import Path

from evocamp.base.files import private_folder

#: Sub-commands that run warm: the steps of the generation loop.
WARM_COMMANDS = frozenset(
    {"init", "evaluate", "tell", "keep", "finalise", "segment", "reevaluate", "reevaluate-shard"}
)
#: A server exits after this many seconds without a request.
IDLE_SECONDS = 120.0
#: A client starts at most one server per code version within this many seconds.
SPAWN_INTERVAL = 30.0
#: Environment variables read at import time: a server serves only callers that
#: agree with it on these.
IMPORT_TIME_PREFIXES = ("OMP_", "OPENBLAS_", "MKL_", "NPY_", "NUMBA_", "VECLIB_", "HDF5_", "PYTHON")
#: Libraries a server imports (pyribs pulls in the last three); an upgrade (new
#: files) changes the key.
PRELOADED_PACKAGES = ("numpy", "h5py", "ribs", "scipy", "sklearn", "pandas")
#: evocamp's own modules a server imports: what the loop's steps use.
PRELOADED_MODULES = ("evocamp.cli", "evocamp.executors.steps")

_STARTED = b"S"
_HEADER = struct.Struct("!Q")
_STATUS = struct.Struct("!i")


def enabled(argv: list[str]) -> bool:
    """Whether ``argv`` (the arguments after ``python -m evocamp``) may run warm."""
    return (
        bool(argv)
        and argv[0] in WARM_COMMANDS
        and os.environ.get("EVOCAMP_WARM_START", "1") != "0"
        and "SLURM_JOB_ID" not in os.environ
    )


def server_folder() -> Path | None:
    """The private folder of this user's servers (``None`` if it is not private)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return private_folder(Path(base) / f"evocamp-warm-{os.getuid()}")


def code_key() -> str:
    """A key of everything a server's imports depend on: interpreter, ``sys.path``,
    import-time environment, evocamp's source files (names, sizes, mtimes) and the
    installed files of the libraries it preloads."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in PRELOADED_PACKAGES:
        found = find_spec(name)
        if found is not None and found.origin:
            info = os.stat(found.origin)
            digest.update(f"{found.origin}:{info.st_size}:{info.st_mtime_ns}\0".encode())
    digest.update(sys.executable.encode())
    digest.update(json.dumps(sys.path[1:]).encode())
    for name in sorted(os.environ):
        if name.startswith(IMPORT_TIME_PREFIXES):
            digest.update(f"{name}={os.environ[name]}\0".encode())
    for path in sorted(package.rglob("*.py")):
        info = path.stat()
        name = path.relative_to(package).as_posix()
        digest.update(f"{name}:{info.st_size}:{info.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:20]


def run_warm(argv: list[str]) -> int | None:
    """Run ``python -m evocamp`` with ``argv`` in a warm child.

    Returns
    -------
    int or None
        The step's exit status, or ``None`` when no warm server could take the step
        (it has not run; the caller runs it cold). A server is started for the
        next steps when none is running.
    """
    if not enabled(argv):
        return None
    folder = server_folder()
    if folder is None:
        return None
    address = folder / f"{code_key()}.sock"
    if len(str(address)) > 100:  # beyond the length limit of Unix socket paths
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(address))
    except OSError:
        connection.close()
        _spawn_server(address)
        return None
    with connection:
        request = json.dumps(
            {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "path": sys.path}
        ).encode()
        try:
            socket.send_fds(connection, [_HEADER.pack(len(request))], _standard_streams())
            connection.sendall(request)
            started = connection.recv(1)
        except OSError:
            return None
        if started != _STARTED:
            return None  # the server went away before the step began: run it cold
        status = _receive_exactly(connection, _STATUS.size)
    if status is None:
        print(
            "evocamp: error: the warm-start process running this step ended without an "
            "exit status (killed?); rerun, or set EVOCAMP_WARM_START=0",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return _STATUS.unpack(status)[0]


def _standard_streams() -> list[int]:
    """Descriptors 0, 1, 2, with ``/dev/null`` for any that is closed."""
    streams = []
    for descriptor in (0, 1, 2):
        try:
            os.fstat(descriptor)
        except OSError:
            descriptor = os.open(os.devnull, os.O_RDWR)
        streams.append(descriptor)
    return streams


def _receive_exactly(connection: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _spawn_server(address: Path) -> None:
    """Start a server for ``address`` in its own session (at most one per
    :data:`SPAWN_INTERVAL`), without waiting for it."""
    import subprocess  # only when no server runs: kept off the client's start-up

    marker = address.with_suffix(".spawned")
    try:
        if time.time() - marker.stat().st_mtime < SPAWN_INTERVAL:
            return
    except FileNotFoundError:
        pass
    marker.touch()
    subprocess.Popen(
        [sys.executable, "-m", "evocamp.warmstart", "serve", str(address)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        start_new_session=True,
        close_fds=True,
    )


def serve(address: Path, *, idle_seconds: float = IDLE_SECONDS) -> None:
    """Serve warm steps on the Unix socket ``address`` until idle for ``idle_seconds``.

    One server per address: a second one exits at once (file lock).
    """
    import fcntl  # the server's own modules: kept off the client's start-up
    import signal

    lock = open(address.with_suffix(".lock"), "a+")  # noqa: SIM115 - held until exit
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    _preload()
    address.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(address))
    listener.listen(64)
    listener.settimeout(idle_seconds)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                return
            if os.fork() == 0:
                # The child must not hold the server's lock: a step outliving its server
                # would keep the next server from starting.
                listener.close()
                lock.close()
                os._exit(_run_child(connection))
            connection.close()
    finally:
        address.unlink(missing_ok=True)


def _preload() -> None:
    """Import what the steps of the generation loop need (not dask: it starts threads,
    and a process must not fork with threads running)."""
    import importlib

    for name in (*PRELOADED_PACKAGES, *PRELOADED_MODULES):
        importlib.import_module(name)
    # The numeric environment, read once for every step forked from here (the server
    # is keyed by the OPENBLAS_ variables and the preloaded packages' files).
    importlib.import_module("evocamp.model.numerics").environment()


def _run_child(connection: socket.socket) -> int:
    """In the forked child: become the caller's process, run the step, report."""
    import signal
    import threading
    import traceback

    for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(number, signal.SIG_DFL)
    connection.settimeout(None)
    header, descriptors, _, _ = socket.recv_fds(connection, _HEADER.size, 3)
    request = json.loads(_receive_exactly(connection, _HEADER.unpack(header)[0]))
    for target, descriptor in enumerate(descriptors):
        os.dup2(descriptor, target)
        os.close(descriptor)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[:] = request["path"]
    sys.argv = [sys.argv[0], *request["argv"]]
    connection.sendall(_STARTED)
    threading.Thread(target=_die_with_client, args=(connection,), daemon=True).start()
    try:
        from evocamp.cli import main

        status = main(request["argv"], warm=True)
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 - report like an uncaught exception would
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        connection.sendall(_STATUS.pack(status))
    except OSError:
        pass
    return status


def _die_with_client(connection: socket.socket) -> None:
    """Kill this child when its client goes away (a cancelled job)."""
    import signal

    try:
        connection.recv(1)
    finally:
        os.kill(os.getpid(), signal.SIGKILL)


def stop_servers() -> int:
    """Stop this user's warm servers (SIGTERM); returns how many were running."""
    import fcntl
    import signal

    folder = server_folder()
    stopped = 0
    for lock_path in sorted(folder.glob("*.lock")) if folder else []:
        with open(lock_path) as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: a server is running
                pid = int(lock.read().strip() or 0)
                if pid:
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except ProcessLookupError:  # it exited since
                        continue
                    stopped += 1
    return stopped


def main(argv: list[str] | None = None) -> None:
    """``python -m evocamp.warmstart serve SOCKET`` (what a client starts) or
    ``python -m evocamp.warmstart stop`` (stop this user's servers now)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"] and len(argv) == 2:
        serve(Path(argv[1]))
    elif argv == ["stop"]:
        print(f"stopped {stop_servers()} warm-start server(s)")
    else:
        sys.exit("usage: python -m evocamp.warmstart serve SOCKET | stop")


if __name__ == "__main__":
    main()
