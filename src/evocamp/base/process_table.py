"""What ``/proc`` says of the machine's processes, for ending an evaluation's whole
tree: the process groups its descendants lead (an MPI launcher puts each task in a
group of its own), and the processes that carry its marker in their environment
(those that left its tree: an orphan re-parented away, the tasks a job-step launcher
such as ``srun`` had Slurm start, which are not its descendants at all).

Where ``/proc`` cannot be read both find nothing.
"""

from __future__ import annotations

import os
import signal

#: The variable a supervised child (:func:`evocamp.base.supervised.supervised`) and
#: every process it starts carry, set to a token of that child's own.
MARKER_VARIABLE = "EVOCAMP_SUPERVISED"


def _process_ids() -> list[str]:
    try:
        return [entry.name for entry in os.scandir("/proc") if entry.name.isdigit()]
    except OSError:
        return []


def descendant_groups(pid: int) -> set[int]:
    """The process groups led by descendants of ``pid`` (read from ``/proc``): those
    its group does not hold, such as the tasks Open MPI's ``mpirun`` starts, each in a
    group of its own; empty where ``/proc`` cannot be read."""
    parents, leaders = {}, set()
    for name in _process_ids():
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                text = stat.read()
        except OSError:  # ended meanwhile
            continue
        state = text[text.rindex(b")") + 2 :].split()  # state ppid pgrp ...
        parents.setdefault(int(state[1]), []).append(int(name))
        if int(state[2]) == int(name):
            leaders.add(int(name))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), ()):
            todo.append(child)
            if child in leaders:
                found.add(child)
    found.discard(pid)
    return found


def marked_processes(*markers: str) -> list[int]:
    """The processes (other than this one) whose environment sets
    :data:`MARKER_VARIABLE` to one of ``markers`` (one scan of ``/proc`` for all);
    those of other users are not readable and so not found."""
    if not markers:
        return []
    needles = [f"\0{MARKER_VARIABLE}={marker}\0".encode() for marker in markers]
    found = []
    for name in _process_ids():
        try:
            with open(f"/proc/{name}/environ", "rb") as environ:
                text = b"\0" + environ.read() + b"\0"
                if any(needle in text for needle in needles):
                    found.append(int(name))
        except OSError:  # ended meanwhile, or not ours
            continue
    return [pid for pid in found if pid != os.getpid()]


def kill_marked(*markers: str) -> list[int]:
    """``SIGKILL`` every process :func:`marked_processes` finds: what an evaluation
    left outside its process tree once the tree was ended; the pids signalled."""
    killed = []
    for pid in marked_processes(*markers):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # ended meanwhile
            continue
        killed.append(pid)
    return killed
