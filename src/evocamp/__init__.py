"""evocamp: Snakemake evaluation campaigns for quality diversity, ES and BO.

Importing the package fixes two process settings that results depend on, before
numpy or numba are loaded by anything that follows:

- single-threaded BLAS, so linear algebra (CMA-ES) does not depend on core counts.
  This is forced, not a default: Snakemake sets ``OMP_NUM_THREADS`` and friends to
  a rule's ``threads`` (8 for an 8-worker Dask segment), which would make the
  segment's linear algebra differ from the shard jobs'. An evaluation function
  that wants threads sets them itself (e.g. with ``threadpoolctl.threadpool_limits``
  or ``torch.set_num_threads``);
- numba's JIT disabled: pyribs' numba kernels then run as plain Python, which is
  as fast for the batch sizes of QD (measured: a 10,000-solution tell takes 15 ms
  either way) and saves 4 s of compilation in every short-lived process. Every
  mode (shard jobs, Dask segments) runs the same code path, so results are
  bitwise identical across them.

It imports nothing heavy itself: every pipeline step imports it.
"""

import os

for _variable in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
):
    os.environ[_variable] = "1"
os.environ["NUMBA_DISABLE_JIT"] = "1"

__version__ = "0.1.0"
