"""A chaotic parallel program: ``python chaos_driver.py MARKER PARAMS RESULTS``, run as
several processes by a launcher (``srun -n 4``, ``mpirun -n 4``) or as one.

Every process (rank: ``SLURM_PROCID``, ``OMPI_COMM_WORLD_RANK`` or ``PMI_RANK``, else 0)
reads the Dakota parameters file and computes; rank 0 writes the results file: a sphere
to minimise and two measures (the first two variables). ``MARKER`` is a word that only
names the campaign on the command line, so that a benchmark finds every process of the
program (and of the processes it starts) with ``ps``.

The evaluation's seed (``EVOCAMP_SEED``, the same on every attempt, shard and rerun)
decides its fate, with ``CHAOS_CRASH``, ``CHAOS_HANG`` and ``CHAOS_FAIL`` the shares
(defaults 0.05, 0.02, 0.03):

- crash: the last rank kills itself with ``SIGKILL`` (the program is killed by a
  signal; rank 0 writes no results);
- hang: every rank starts a child (this script with ``--child``, the marker on its
  command line) and both sleep for an hour, ignoring ``SIGTERM``;
- fail: rank 0 writes ``fail``.
"""

import os
import random
import signal
import subprocess
import sys
import time

RANK_VARIABLES = ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def rank_and_size():
    for name in RANK_VARIABLES:
        if name in os.environ:
            size = os.environ.get("SLURM_NTASKS") or os.environ.get("OMPI_COMM_WORLD_SIZE")
            return int(os.environ[name]), int(size or os.environ.get("PMI_SIZE", "1"))
    return 0, 1


def fate(seed):
    """``crash``, ``hang``, ``fail`` or ``ok``: from the seed alone."""
    draw = random.Random(seed).random()
    crash = float(os.environ.get("CHAOS_CRASH", "0.05"))
    hang = float(os.environ.get("CHAOS_HANG", "0.02"))
    fail = float(os.environ.get("CHAOS_FAIL", "0.03"))
    for name, share in (("crash", crash), ("hang", crash + hang), ("fail", crash + hang + fail)):
        if draw < share:
            return name
    return "ok"


def hang(marker):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "--child" not in sys.argv:
        subprocess.Popen([sys.executable, "-S", __file__, marker, "--child"])
    time.sleep(3600)


def main(argv):
    marker = argv[0]
    if "--child" in argv:
        hang(marker)
        return
    params, results = argv[-2:]
    rank, size = rank_and_size()
    lines = [line.split() for line in open(params) if line.strip()]
    values = [float(words[0]) for words in lines[1 : 1 + int(lines[0][0])]]
    outcome = fate(int(os.environ["EVOCAMP_SEED"]))
    if outcome == "hang":
        hang(marker)
    if outcome == "crash" and rank == size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    objective = sum(x * x for x in values)  # every rank computes it
    if rank != 0 or outcome == "crash":
        return
    with open(results, "w") as handle:
        if outcome == "fail":
            handle.write("fail\n")
        else:
            handle.write(f"{objective!r} objective\n{values[0]!r} m1\n{values[1]!r} m2\n")


if __name__ == "__main__":
    main(sys.argv[1:])
