"""BIPOP-CMA-ES (evocamp's ``bipop_cma_es``) against the published BBOB-2009 runs of
BIPOP-CMA-ES (Hansen 2009) in 10-D: ERT to precision 1e-8 on f1 (sphere) and f8
(Rosenbrock), and the proportion of (function, run) pairs solved to 1e-8 on f1-f24
within a budget, side by side.

    python benchmarks/bipop_fidelity.py [--budget 1000] [--instances 1-5] [--seeds 3]
        [--functions 1-24] [--ert-functions 1,8] [--ert-budget 100000]
        [--setting coco|x0-zero|no-active|x0-once] [--cocopp-pickle PATH]

The published numbers are BBOB-2009's data of BIPOP-CMA-ES (coco's data archive
``bbob/2009/BIPOP-CMA-ES_hansen_noiseless.tgz``: 15 trials per function and dimension,
instances 1-5 three times each, single evaluations counted) as ``cocopp`` ships them:
``PUBLISHED`` below is ``pprldistr2009_1e-8.pickle.gz['BIPOP-CMA-ES'][f][10]`` of
cocopp 2.9.1 (PyPI sdist, ``src/cocopp/``; sha256 of the file 40ff96d2...e0fae25c): per
trial, the evaluations to reach f - f_opt <= 1e-8 (``None``: never) and the trial's
evaluations in all. ``--cocopp-pickle`` checks the table against that file.

evocamp's runs: the campaign's own optimizer, ``build_optimizer`` of the run spec of a
``bipop_cma_es`` algorithm (``sigma: 2``, Hansen 2009's sigma0) on a ``bbob`` suite grid
(dimension 10, ``--instances``, ``--seeds`` seeds each; master seed 0): the campaign's
seed derivation, pycma's ask/tell as the tell step drives it (evaluations bitwise
``cma.fmin2``'s for the same seed: tests/unit/test_pycma.py), each batch evaluated by
the domain function. It runs in one process until the target 1e-8 or the budget (the
batch that hits it is counted to the evaluation that does, as COCO counts). The
setting (:data:`SETTINGS`) is the domain's: ``coco`` (the default) is BBOB-2009's
setup, ``x0: random`` and ``bounded: false`` (x0 uniform in [-4, 4]^D, drawn anew at
every restart, no bounds: cmaes.m 3.31.bbob's ``bipopcmaes('fgeneric', '8 *
rand(10,1) - 4', 2, opts)``); ``x0-zero`` the domain's defaults (x0 = 0, pycma's
boundary transformation into [-5, 5]). What still differs: pycma 4.5's defaults, not
those of cmaes.m of 2009, among them the active covariance update (``CMA_active``):
``--setting no-active`` turns it off, ``--setting x0-once`` the restarts' own x0 (an
investigation of the differences, not a campaign's runs).

ERT (:func:`~evocamp.reporting.runtime_to_target.expected_running_time`): the
evaluations of every run (until the target, or all of them) over the runs that reach
it; its range is the 10th-90th percentile of the ERT of 1,000 bootstrap resamples of
the runs (seeded); p: the two-sided rank-sum test of the two sets of runtimes. Prints
Markdown (benchmarks/RESULTS.md, "BIPOP-CMA-ES against its BBOB-2009 runs").
"""

from __future__ import annotations

import argparse
import gzip
import pickle
import sys
import time

import numpy as np
from scipy.stats import mannwhitneyu

from evocamp.catalogue.factory import build_optimizer
from evocamp.config import run_spec, validate_config
from evocamp.config.suites import suite_values
from evocamp.reporting.runtime_to_target import expected_running_time
from evocamp.reporting.suite import BBOB_TARGETS
from evocamp.tasks import bbob

DIMENSION = 10
TARGET = 1e-8
#: Hansen 2009's initial step size (x0 uniform in [-4, 4]^D, sigma0 = 2).
SIGMA = 2.0
BOOTSTRAPS = 1000

#: BBOB-2009's 15 trials of BIPOP-CMA-ES in 10-D per function: evaluations to f - f_opt
#: <= 1e-8 (None: never) and the trial's evaluations in all. From cocopp 2.9.1's
#: ``pprldistr2009_1e-8.pickle.gz`` (see the module's docstring).
# fmt: off
PUBLISHED = {
    1: (
        [1475, 1477, 1367, 1645, 1389, 1483, 1451, 1496, 1496, 1654, 1422, 1504, 1445, 1435, 1338],
        [1482, 1482, 1372, 1652, 1392, 1492, 1452, 1502, 1502, 1662, 1432, 1512, 1452, 1442, 1342],
    ),
    2: (
        [5886, 6234, 6346, 6151, 5676, 6269, 5952, 6004, 6053, 5964, 6307, 6036, 6253, 6112, 6201],
        [5892, 6242, 6352, 6152, 5682, 6272, 5962, 6012, 6062, 5972, 6312, 6042, 6262, 6122, 6202],
    ),
    3: (
        [None, 170233, None, None, 2116851, None, None, None, None, None, None, None, None, None,
         None],
        [2949935, 170456, 2943306, 3380985, 2116879, 3251250, 3019432, 2816421, 2854085, 3075928,
         3429305, 3243071, 2837889, 3271827, 3425333],
    ),
    4: (
        [None, None, None, None, None, None, None, None, None, None, None, None, None, None, None],
        [3519796, 3049338, 3152856, 3201219, 2931389, 3140809, 3456985, 3053218, 3205333, 3194735,
         3112937, 3114734, 3041059, 2882895, 3097444],
    ),
    5: (
        [145, 154, 90, 146, 92, 113, 106, 155, 96, 117, 120, 113, 154, 90, 155],
        [152, 162, 92, 152, 102, 122, 112, 162, 102, 122, 122, 122, 162, 92, 162],
    ),
    6: (
        [4834, 3683, 4521, 4584, 4389, 3925, 4171, 4370, 4673, 5060, 4431, 4082, 4471, 4266, 4799],
        [4842, 3692, 4522, 4592, 4392, 3932, 4172, 4372, 4682, 5062, 4432, 4092, 4472, 4272, 4802],
    ),
    7: (
        [7396, 4037, 8436, 16278, 3847, 3394, 15348, 7378, 16536, 6067, 6337, 6228, 6727, 3304,
         6520],
        [7436, 4044, 8448, 16315, 3864, 3404, 15394, 7406, 16557, 6096, 6366, 6246, 6766, 3324,
         6536],
    ),
    8: (
        [6230, 5808, 5732, 6564, 5947, 5951, 6497, 5334, 6944, 7068, 7028, 7170, 6007, 6844, 6354],
        [6232, 5812, 5742, 6572, 5952, 5952, 6502, 5342, 6952, 7072, 7032, 7172, 6012, 6852, 6362],
    ),
    9: (
        [7274, 6496, 8429, 6351, 6167, 5965, 7220, 6898, 6399, 8293, 5993, 6173, 5713, 6403, 6903],
        [7282, 6502, 8432, 6352, 6172, 5972, 7222, 6902, 6402, 8302, 6002, 6182, 5722, 6412, 6912],
    ),
    10: (
        [5964, 5985, 5603, 6360, 5939, 5507, 5797, 5992, 6058, 6079, 6201, 5882, 6268, 5761, 6033],
        [5972, 5992, 5612, 6362, 5942, 5512, 5802, 6002, 6062, 6082, 6202, 5892, 6272, 5762, 6042],
    ),
    11: (
        [5746, 5630, 6203, 5913, 5557, 5812, 5485, 5584, 5701, 5888, 5684, 6046, 5555, 5665, 5673],
        [5752, 5632, 6212, 5922, 5562, 5822, 5492, 5592, 5702, 5892, 5692, 6052, 5562, 5672, 5682],
    ),
    12: (
        [23003, 11651, 14539, 15988, 11043, 11953, 12480, 22632, 10862, 16741, 19833, 8271, 5827,
         5833, 15349],
        [23012, 11652, 14542, 15992, 11052, 11962, 12482, 22642, 10872, 16742, 19842, 8272, 5832,
         5842, 15352],
    ),
    13: (
        [16307, 33150, 7824, 9261, 7906, 20393, 31324, 9104, 18955, 13919, 16414, 8244, 17817, 7862,
         18307],
        [16324, 33176, 7832, 9262, 7912, 20404, 31326, 9112, 18964, 13924, 16424, 8252, 17834, 7872,
         18324],
    ),
    14: (
        [7029, 6956, 7072, 6855, 7831, 7409, 7088, 7655, 7214, 7349, 6560, 7134, 7181, 6771, 7732],
        [7032, 6962, 7082, 6862, 7832, 7412, 7092, 7662, 7222, 7352, 6562, 7142, 7182, 6772, 7742],
    ),
    15: (
        [85794, 142092, 38632, 83572, 80284, 83043, 140889, 87225, 140690, 118145, 78816, 144191,
         144128, 76984, 153624],
        [85858, 142157, 38636, 83598, 80431, 83197, 141194, 87249, 140982, 118219, 78883, 144406,
         144219, 77134, 153854],
    ),
    16: (
        [21569, 44674, 53885, 63369, 186595, 136951, 51108, 21418, 136709, 50929, 113092, 56473,
         21028, 74418, 50124],
        [21596, 44714, 53962, 63400, 186675, 137010, 51160, 21446, 136754, 51009, 113251, 56484,
         21066, 74430, 50183],
    ),
    17: (
        [23014, 41712, 23889, 24323, 24022, 12532, 54010, 28521, 24766, 11074, 23553, 23951, 25413,
         56042, 11608],
        [23046, 41742, 23916, 24346, 24056, 12534, 54088, 28556, 24786, 11094, 23566, 23986, 25426,
         56115, 11614],
    ),
    18: (
        [59858, 25098, 55795, 58758, 65451, 62141, 26052, 58887, 24568, 61391, 66960, 63219, 56478,
         55794, 63355],
        [59914, 25136, 55864, 58820, 65520, 62212, 26086, 58952, 24606, 61462, 67031, 63235, 56500,
         55866, 63368],
    ),
    19: (
        [984380, 1187965, 1007470, 1016282, 1010765, 910723, 1967488, 1868345, 1329069, 1893884,
         2131204, 1227988, 1212809, 1253955, 1934985],
        [985628, 1188960, 1008724, 1017324, 1011283, 911234, 1969771, 1870803, 1329768, 1894292,
         2133469, 1228240, 1214033, 1255223, 1937515],
    ),
    20: (
        [559782, 283950, 630444, 549507, 561487, 573005, 566422, 567781, 587167, 597274, 567245,
         1137125, 569120, 549883, 596233],
        [561013, 284287, 631377, 550325, 562401, 573437, 567014, 568971, 588051, 597519, 568507,
         1139668, 570386, 550907, 597376],
    ),
    21: (
        [384605, 1166, 142790, 91538, 34887, 24384, 24724, 34944, 1044, 49693, 39008, 23337, 34281,
         13769, 174494],
        [385137, 1172, 143393, 91702, 34920, 24432, 24734, 34946, 1052, 49761, 39011, 23395, 34283,
         13778, 174761],
    ),
    22: (
        [155584, 937020, 35626, None, None, 105480, 70950, None, 518101, None, 17707, None, None,
         1222558, 600761],
        [155590, 937048, 35643, 1248870, 1228687, 105489, 70959, 1368882, 518286, 1335624, 17722,
         1294212, 1354555, 1222582, 600795],
    ),
    23: (
        [224374, 452707, 698173, 230603, 106269, 288304, 55935, 439166, 209541, 99309, 846542,
         407815, 143091, 243413, 136202],
        [224532, 452716, 698494, 230779, 106365, 288412, 55940, 439345, 209634, 99343, 846735,
         407944, 143169, 243493, 136319],
    ),
    24: (
        [None, None, None, None, None, None, None, None, None, 2379366, None, None, None, None,
         None],
        [5423335, 5212296, 4937336, 5002853, 5884514, 5117667, 5058394, 4971123, 5072670, 2380476,
         4775938, 5098203, 5113021, 5148109, 5585761],
    ),
}
# fmt: on


def published(function: int, budget: float) -> tuple[np.ndarray, np.ndarray]:
    """The published trials of ``function`` cut at ``budget`` evaluations: runtimes to
    1e-8 (``inf``: not within the budget) and the evaluations each trial spent."""
    reached, spent = PUBLISHED[function]
    runtimes = np.array([np.inf if r is None else r for r in reached], dtype=np.float64)
    runtimes[runtimes > budget] = np.inf
    totals = np.minimum(np.array(spent, dtype=np.float64), budget)
    return runtimes, np.where(np.isfinite(runtimes), runtimes, totals)


def check_published(path: str) -> None:
    """Fail unless :data:`PUBLISHED` is cocopp's pickle ``path`` for BIPOP-CMA-ES, 10-D."""
    with gzip.open(path) as stream:
        data = pickle.load(stream, encoding="latin1")["BIPOP-CMA-ES"]
    for function, (reached, spent) in PUBLISHED.items():
        runlengths, evaluations = data[function][DIMENSION]
        ours = np.array([np.nan if r is None else r for r in reached], dtype=np.float64)
        if not (
            np.array_equal(ours, runlengths[1:], equal_nan=True)
            and np.array_equal(np.array(spent, dtype=np.float64), evaluations)
        ):
            sys.exit(f"PUBLISHED of f{function} differs from {path}")
    print(f"PUBLISHED is {path}'s BIPOP-CMA-ES, 10-D, f1-f24", file=sys.stderr)


def numbers(text: str) -> list[int]:
    """``"1-5"`` or ``"1,8"`` as integers (a suite grid's axis)."""
    return suite_values([int(part) if part.isdigit() else part for part in text.split(",")])


#: The settings of evocamp's runs: the domain's (``x0``, ``bounded``) of a campaign, and
#: one investigation (not a campaign's runs) of what else differs from the published runs.
SETTINGS = {
    "coco": "x0: random (uniform in [-4, 4]^D, anew every restart), bounded: false: "
    "BBOB-2009's setup",
    "x0-zero": "x0 = 0 and bounds [-5, 5], the bbob domain's defaults",
    "no-active": "as coco, and pycma's CMA_active off (2009's CMA-ES had no active "
    "covariance update; an investigation, not a campaign's run)",
    "x0-once": "as coco, but every restart from the run's first x0 (an investigation: "
    "fmin2 with a fixed x0)",
}
#: The bbob domain's keys of each setting.
DOMAIN_KEYS = {
    "coco": {"x0": "random", "bounded": False},
    "x0-zero": {},
    "no-active": {"x0": "random", "bounded": False},
    "x0-once": {"x0": "random", "bounded": False},
}


def campaign(functions: list[int], instances: list[int], *, setting: str = "coco") -> dict:
    """The validated campaign whose run specs the runs are: ``bipop_cma_es`` with
    ``sigma`` 2 on a ``bbob`` grid in dimension 10 (master seed 0), with the domain keys
    of ``setting`` (:data:`DOMAIN_KEYS`)."""
    return validate_config(
        {
            "master_seed": 0,
            "algorithms": {"bipop": {"type": "bipop_cma_es", "sigma": SIGMA}},
            "domains": {
                "bbob": {
                    "type": "bbob",
                    "functions": functions,
                    "dimensions": [DIMENSION],
                    "instances": instances,
                    **DOMAIN_KEYS[setting],
                }
            },
        }
    )


def run(
    spec: dict, *, budget: int, targets: np.ndarray, setting: str = "coco"
) -> tuple[np.ndarray, int, int]:
    """One run of the campaign's optimizer until the last target or ``budget``
    evaluations: the evaluation at which the best precision first reaches each target
    (``inf``: never), the evaluations spent and the restarts made. ``setting``
    ``no-active`` turns pycma's active covariance update off before the first ask (its
    restarts keep the option), ``x0-once`` the restarts' own draws."""
    optimizer = build_optimizer(spec)
    if setting == "x0-once":
        optimizer.restart_x0 = None
    if setting == "no-active":
        optimizer.options["CMA_active"] = False
        optimizer.es = optimizer._start(sigma_factor=1.0)
    params = spec["domain_spec"]["params"]
    runtimes = np.full(len(targets), np.inf)
    evaluations = 0
    best = np.inf
    while evaluations < budget and not np.isfinite(runtimes[-1]):
        batch = optimizer.ask()
        outputs = bbob.bbob(batch, np.zeros(len(batch), dtype=np.uint64), **params)
        precision = np.minimum.accumulate(np.minimum(outputs["precision"], best))
        best = precision[-1]
        for index in np.flatnonzero(~np.isfinite(runtimes)):
            hit = np.flatnonzero(precision <= targets[index])
            if len(hit) and evaluations + hit[0] + 1 <= budget:
                runtimes[index] = evaluations + hit[0] + 1
        evaluations = min(evaluations + len(batch), budget)
        optimizer.tell(outputs["objective"])
    spent = int(runtimes[-1]) if np.isfinite(runtimes[-1]) else evaluations
    return runtimes, spent, optimizer.irun


def evocamp_runs(
    functions: list[int],
    instances: list[int],
    seeds: int,
    *,
    budget: int,
    targets: np.ndarray,
    setting: str = "coco",
) -> dict[int, tuple[np.ndarray, np.ndarray, int]]:
    """Per function, the ``(runs, targets)`` runtimes, the evaluations of each run and
    the runs that restarted before reaching the last target."""
    config = campaign(functions, instances, setting=setting)
    found = {}
    for function in functions:
        runtimes, spent, restarted = [], [], 0
        began = time.perf_counter()
        for instance in instances:
            domain = f"bbob_f{function}_d{DIMENSION}_i{instance}"
            for seed in range(seeds):
                spec = run_spec(config, algorithm="bipop", domain=domain, seed=seed)
                found_runtimes, found_spent, restarts = run(
                    spec, budget=budget, targets=targets, setting=setting
                )
                runtimes.append(found_runtimes)
                spent.append(found_spent)
                restarted += int(restarts > 0)
        found[function] = (np.array(runtimes), np.array(spent, dtype=np.float64), restarted)
        print(
            f"f{function}: {len(spent)} runs, {int(sum(spent))} evaluations, "
            f"{time.perf_counter() - began:.0f} s",
            file=sys.stderr,
        )
    return found


def ert_range(runtimes: np.ndarray, totals: np.ndarray) -> tuple[float, float, float]:
    """ERT of one target over runs and the 10th and 90th percentiles of the ERT of
    :data:`BOOTSTRAPS` resamples of the runs."""
    ert = float(expected_running_time(runtimes[:, None], totals)[0])
    draws = np.random.default_rng(2009).integers(0, len(totals), (BOOTSTRAPS, len(totals)))
    resampled = [float(expected_running_time(runtimes[d, None], totals[d])[0]) for d in draws]
    low, high = np.percentile(resampled, [10, 90])
    return ert, float(low), float(high)


def count(value: float) -> str:
    return "inf" if not np.isfinite(value) else f"{value:,.0f}"


def spread(runtimes: np.ndarray) -> str:
    """The median, least and greatest runtime of the runs (``inf``: not reached)."""
    return f"{count(np.median(runtimes))} ({count(runtimes.min())}-{count(runtimes.max())})"


def ert_table(ours: dict, functions: list[int], *, budget: int, setting: str) -> None:
    """The ERT to 1e-8 side by side."""
    print(
        f"ERT to f - f_opt <= 1e-8 in {DIMENSION}-D (evaluations; budget {budget:,}; "
        f"evocamp: {SETTINGS[setting]}):\n"
    )
    print(
        "| function | published ERT (10-90 %) | solved | median (min-max) | evocamp ERT (10-90 %) "
        "| solved | median (min-max) | restarted | ratio | rank-sum p |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for function in functions:
        theirs, their_totals = published(function, np.inf)
        runtimes, totals, restarted = ours[function]
        mine = runtimes[:, -1]
        a, b = ert_range(theirs, their_totals), ert_range(mine, totals)
        p = mannwhitneyu(theirs, mine, alternative="two-sided").pvalue
        ratio = b[0] / a[0] if np.isfinite(a[0]) and np.isfinite(b[0]) else float("nan")
        print(
            f"| f{function} {bbob.function_name(function)} "
            f"| {count(a[0])} ({count(a[1])}-{count(a[2])}) "
            f"| {np.isfinite(theirs).sum()}/{len(theirs)} | {spread(theirs)} "
            f"| {count(b[0])} ({count(b[1])}-{count(b[2])}) "
            f"| {np.isfinite(mine).sum()}/{len(mine)} | {spread(mine)} | {restarted} "
            f"| {ratio:.2f} | {p:.2f} |"
        )
    print()


def proportion_table(ours: dict, functions: list[int], *, budget: int) -> None:
    """Per function and in all, the runs solved to 1e-8 within ``budget`` (published
    and evocamp's) and evocamp's fraction of (run, target) pairs over the 51 targets."""
    print(
        f"Solved within {budget:,} evaluations ({budget // DIMENSION:,} x D), {DIMENSION}-D: "
        f"runs reaching 1e-8, and evocamp's (run, target) pairs over COCO's 51 targets "
        f"1e2..1e-8:\n"
    )
    print("| function | published, 1e-8 | evocamp, 1e-8 | evocamp, 51 targets |")
    print("|---|---|---|---|")
    theirs_all, mine_all, pairs = [], [], []
    for function in functions:
        theirs, _ = published(function, budget)
        runtimes, _, _ = ours[function]
        theirs_all.append(np.isfinite(theirs))
        mine_all.append(np.isfinite(runtimes[:, -1]))
        pairs.append(np.isfinite(runtimes))
        print(
            f"| f{function} | {np.isfinite(theirs).sum()}/{len(theirs)} "
            f"| {np.isfinite(runtimes[:, -1]).sum()}/{len(runtimes)} "
            f"| {np.isfinite(runtimes).mean():.2f} |"
        )
    theirs_all, mine_all = np.concatenate(theirs_all), np.concatenate(mine_all)
    pairs = np.concatenate(pairs)
    print(
        f"| **f{functions[0]}-f{functions[-1]}** | **{theirs_all.mean():.3f}** "
        f"({theirs_all.sum()}/{len(theirs_all)}) | **{mine_all.mean():.3f}** "
        f"({mine_all.sum()}/{len(mine_all)}) | **{pairs.mean():.3f}** (published: at least "
        f"{theirs_all.mean():.3f}) |"
    )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--budget", type=int, default=1000, help="evaluations / D of the f1-f24 part"
    )
    parser.add_argument("--ert-budget", type=int, default=100_000, help="of the f1, f8 part")
    parser.add_argument("--instances", default="1-5")
    parser.add_argument("--seeds", type=int, default=3, help="runs per instance")
    parser.add_argument("--functions", default="1-24", help="of the proportion part")
    parser.add_argument("--ert-functions", default="1,8")
    parser.add_argument(
        "--setting",
        choices=list(SETTINGS),
        default="coco",
        help="of the runs: " + "; ".join(f"{k}: {v}" for k, v in SETTINGS.items()),
    )
    parser.add_argument("--cocopp-pickle", help="cocopp's pprldistr2009_1e-8.pickle.gz")
    args = parser.parse_args()
    if args.cocopp_pickle:
        check_published(args.cocopp_pickle)
    instances = numbers(args.instances)
    only = np.array([TARGET])
    ert_functions = numbers(args.ert_functions)
    ours = evocamp_runs(
        ert_functions,
        instances,
        args.seeds,
        budget=args.ert_budget,
        targets=only,
        setting=args.setting,
    )
    ert_table(ours, ert_functions, budget=args.ert_budget, setting=args.setting)
    functions = numbers(args.functions)
    if args.budget:
        budget = args.budget * DIMENSION
        ours = evocamp_runs(
            functions,
            instances,
            args.seeds,
            budget=budget,
            targets=BBOB_TARGETS,
            setting=args.setting,
        )
        proportion_table(ours, functions, budget=budget)


if __name__ == "__main__":
    main()
