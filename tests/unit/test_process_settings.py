"""Process settings fixed by ``import evocamp``, whatever the environment says."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = (
    "import evocamp, numpy, os, json, threadpoolctl\n"
    "blas = [i['num_threads'] for i in threadpoolctl.threadpool_info()"
    " if i['user_api'] == 'blas']\n"
    "print(json.dumps({'blas': blas, 'numba_jit_off': os.environ['NUMBA_DISABLE_JIT']}))\n"
)


def test_blas_is_single_threaded_even_when_snakemake_asks_for_more():
    # Snakemake sets these to a rule's `threads` (8 for an 8-worker Dask segment).
    threads = {name: "8" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    completed = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, **threads},
        capture_output=True,
        text=True,
        check=True,
    )
    settings = json.loads(completed.stdout)
    assert settings["blas"] and set(settings["blas"]) == {1}
    assert settings["numba_jit_off"] == "1"
