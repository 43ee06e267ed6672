#!/usr/bin/env python3
"""An airfoil analysed by xfoil: a Dakota-style analysis driver (``driver params results``).

Reads a parameters file in Dakota's standard format (ten design variables in [-1, 1]),
builds a PARSEC airfoil from them (0 is the base airfoil, near the RAE 2822, as in
SAIL's airfoil domain), runs xfoil headless on it at one operating point and writes a
results file in Dakota's format, one value per line:

    objective   -log(cd) x area penalty x lift penalty (SAIL's fitness, negated: higher is better)
    measure_1   x of the upper surface's crest (chord fraction), SAIL's X_up
    measure_2   height of that crest (chord fraction), SAIL's Z_up
    cd, cl      xfoil's drag and lift coefficients
    area        the airfoil's cross-section area (chord^2 = 1)

or ``fail <why>`` when the geometry is invalid (surfaces crossing), xfoil crashes, hangs
(``XFOIL_TIMEOUT`` seconds, default 20) or does not converge. See docs/airfoil.md.

Runs under evocamp's ``type: command`` domain and under Dakota's ``fork`` interface
unchanged. Needs numpy and the ``xfoil`` program (``apt-get install xfoil``; another
executable: the ``XFOIL`` environment variable).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

# Operating point: Reynolds number, Mach number, angle of attack (degrees).
REYNOLDS = 1.0e6
MACH = 0.5
ALPHA = 2.7
ITERATIONS = 100
POINTS_PER_SIDE = 81

# The PARSEC parameters of SAIL's ten free dimensions, in their order: the base value
# (the design at variables 0) and the half-width of its range (variables -1 and 1).
# Trailing-edge thickness and offset are frozen at 0 (a sharp trailing edge), as in SAIL.
VARIABLES = (
    # name      base      half-width
    ("r_le_up", 0.0085, 0.0045),  # leading-edge radius, upper surface
    ("x_up", 0.43, 0.15),  # crest position, upper surface
    ("z_up", 0.063, 0.025),  # crest height, upper surface
    ("zxx_up", -0.43, 0.25),  # crest curvature, upper surface
    ("r_le_lo", 0.0085, 0.0045),  # leading-edge radius, lower surface
    ("x_lo", 0.345, 0.15),  # crest position, lower surface
    ("z_lo", -0.058, 0.025),  # crest height (negative), lower surface
    ("zxx_lo", 0.70, 0.35),  # crest curvature, lower surface
    ("alpha_te", -2.5, 4.0),  # trailing-edge direction (degrees)
    ("beta_te", 9.0, 5.0),  # trailing-edge wedge angle (degrees)
)

# The base airfoil's lift coefficient at the operating point (xfoil 6.99, this driver's
# paneling): SAIL's penalties compare every design's lift and area with the base's.
BASE_CL = 0.4995

# Debian's xfoil is built to trap floating-point exceptions (gfortran -ffpe-trap), so
# its viscous solver dies with SIGFPE on any airfoil; a shim preloaded in its place
# keeps the default IEEE behaviour (built once with the C compiler, cached).
NO_FPE_SHIM = "void _gfortran_set_fpe(int flags) { (void) flags; }\n"


def parsec_surface(params, *, upper):
    """Coefficients ``a`` of one PARSEC surface ``z = sum_n a_n x^(n - 1/2)``, n = 1..6.

    Parameters
    ----------
    params : dict
        The PARSEC parameters (:func:`design`); the trailing edge is sharp (height 0).
    upper : bool
        The upper surface (its ``*_up`` parameters, a positive leading-edge term) or the
        lower one (``*_lo``).
    """
    side = "up" if upper else "lo"
    alpha, beta = math.radians(params["alpha_te"]), math.radians(params["beta_te"])
    slope_te = math.tan(alpha - beta / 2) if upper else math.tan(alpha + beta / 2)
    x_crest = params[f"x_{side}"]
    powers = np.arange(1, 7) - 0.5
    rows = [
        (powers == 0.5).astype(float),  # a_1 = +-sqrt(2 r_le)
        np.ones(6),  # z(1): the trailing edge's height
        x_crest**powers,  # z(x_crest)
        powers * x_crest ** (powers - 1),  # z'(x_crest) = 0
        powers * (powers - 1) * x_crest ** (powers - 2),  # z''(x_crest)
        powers,  # z'(1): the trailing edge's slope
    ]
    sign = 1.0 if upper else -1.0
    rhs = [
        sign * math.sqrt(2.0 * params[f"r_le_{side}"]),
        0.0,
        params[f"z_{side}"],
        0.0,
        params[f"zxx_{side}"],
        slope_te,
    ]
    return np.linalg.solve(np.array(rows), np.array(rhs))


def design(variables):
    """The PARSEC parameters (name -> value) of a design's ten variables in [-1, 1]."""
    values = np.clip(np.asarray(variables, dtype=float), -1.0, 1.0)
    if values.shape != (len(VARIABLES),):
        raise ValueError(f"expected {len(VARIABLES)} variables, got {values.size}")
    return {name: base + half * v for (name, base, half), v in zip(VARIABLES, values, strict=True)}


def airfoil(params, points=POINTS_PER_SIDE):
    """Coordinates of a PARSEC airfoil, Selig order (trailing edge, upper, lower).

    Returns
    -------
    x, z_upper, z_lower : numpy.ndarray
        Chordwise stations (cosine spacing, 0 to 1) and both surfaces' heights there.
    """
    upper, lower = parsec_surface(params, upper=True), parsec_surface(params, upper=False)
    x = 0.5 * (1.0 - np.cos(np.linspace(0.0, math.pi, points)))
    powers = np.arange(1, 7) - 0.5
    basis = x[:, None] ** powers[None, :]
    return x, basis @ upper, basis @ lower


def geometry_problem(shape):
    """Why the airfoil ``shape`` (:func:`airfoil`) cannot be analysed (surfaces crossing
    or not finite), or None."""
    x, z_upper, z_lower = shape
    if not (np.all(np.isfinite(z_upper)) and np.all(np.isfinite(z_lower))):
        return "surfaces not finite"
    inner = slice(1, -1)
    if np.any(z_upper[inner] <= z_lower[inner]):
        crossing = x[inner][np.argmax(z_upper[inner] <= z_lower[inner])]
        return f"upper and lower surfaces cross at x = {crossing:.3f}"
    return None


def area(shape):
    """Cross-section area between the surfaces of ``shape`` (trapezoidal rule)."""
    x, z_upper, z_lower = shape
    thickness = z_upper - z_lower
    return float(np.sum(0.5 * (thickness[1:] + thickness[:-1]) * np.diff(x)))


def crest(params):
    """Position and height of the upper surface's highest point (SAIL's X_up, Z_up),
    found on a fine grid (a point every 0.002 chord or closer)."""
    x, z_upper, _ = airfoil(params, points=1601)
    top = int(np.argmax(z_upper))
    return float(x[top]), float(z_upper[top])


def no_fpe_shim():
    """Path of the shim that keeps xfoil from trapping floating-point exceptions, or None
    when no C compiler is found (xfoil then runs as installed)."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evocamp"
    shim = cache / "xfoil-no-fpe.so"
    if shim.exists():
        return shim
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        source = Path(scratch) / "no_fpe.c"
        source.write_text(NO_FPE_SHIM)
        built = Path(scratch) / "no_fpe.so"
        compiled = subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", str(built), str(source)],
            capture_output=True,
        )
        if compiled.returncode != 0:
            return None
        os.replace(built, shim)  # atomic: concurrent evaluations may race here
    return shim


def xfoil_polar(shape, *, reynolds=REYNOLDS, mach=MACH, alpha=ALPHA, timeout=None):
    """Lift and drag coefficients ``(cl, cd)`` of an airfoil from xfoil, or a line
    saying why there are none (no convergence, a crash, a hang past ``timeout``
    seconds: default ``XFOIL_TIMEOUT`` or 20). ``shape``: ``(x, z_upper, z_lower)``."""
    x, z_upper, z_lower = shape
    if timeout is None:
        timeout = float(os.environ.get("XFOIL_TIMEOUT", "20"))
    executable = shutil.which(os.environ.get("XFOIL", "xfoil"))
    if executable is None:
        raise FileNotFoundError("xfoil not found: apt-get install xfoil (or set XFOIL)")
    env = dict(os.environ)
    shim = no_fpe_shim()
    if shim is not None:
        env["LD_PRELOAD"] = " ".join(filter(None, [str(shim), env.get("LD_PRELOAD")]))
    with tempfile.TemporaryDirectory(prefix="xfoil-") as scratch:
        shape = Path(scratch) / "airfoil.dat"
        xs = np.concatenate([x[::-1], x[1:]])
        zs = np.concatenate([z_upper[::-1], z_lower[1:]])
        shape.write_text(
            "airfoil\n" + "".join(f"{a:.8f} {b:.8f}\n" for a, b in zip(xs, zs, strict=True))
        )
        commands = [
            "PLOP", "G F", "",  # no graphics (no X11 needed)
            "LOAD airfoil.dat", "PANE",
            "OPER", f"VISC {reynolds:g}", f"MACH {mach:g}", f"ITER {ITERATIONS}",
            "PACC", "polar.txt", "",
            f"ALFA {alpha:g}", "", "QUIT",
        ]  # fmt: skip
        try:
            run = subprocess.run(
                [executable],
                input="\n".join(commands) + "\n",
                cwd=scratch,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            return f"xfoil ran past {timeout:g} s (XFOIL_TIMEOUT) and was killed"
        polar = Path(scratch) / "polar.txt"
        rows = polar.read_text().splitlines() if polar.exists() else []
    for line in rows:
        fields = line.split()
        if len(fields) >= 7 and all(_is_number(field) for field in fields):
            return float(fields[1]), float(fields[2])  # alpha CL CD CDp CM Top_Xtr Bot_Xtr
    if run.returncode != 0:
        how = f"signal {-run.returncode}" if run.returncode < 0 else f"status {run.returncode}"
        return f"xfoil ended with {how} before converging"
    return f"xfoil did not converge at alpha {alpha:g} (Re {reynolds:g}, Mach {mach:g})"


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def objective(cd, cl, section_area):
    """SAIL's airfoil fitness, negated to be maximised: ``-log(cd)`` times an area
    penalty ``(1 - |A - A0| / A0)^7`` and a lift penalty ``(1 - |cl - cl0| / cl0)^2``
    that applies only when lift is below the base airfoil's (A0, cl0)."""
    area_penalty = max(0.0, 1.0 - abs(section_area - BASE_AREA) / BASE_AREA) ** 7
    lift_penalty = 1.0 if cl > BASE_CL else max(0.0, 1.0 - abs(cl - BASE_CL) / BASE_CL) ** 2
    return -math.log(cd) * area_penalty * lift_penalty


BASE_AREA = area(airfoil(design(np.zeros(len(VARIABLES)))))


def evaluate(variables):
    """Results of one design: dict of objective, crest x and z, cd, cl, area; or a
    string saying why it failed."""
    params = design(variables)
    shape = airfoil(params)
    problem = geometry_problem(shape)
    if problem is not None:
        return problem
    polar = xfoil_polar(shape)
    if isinstance(polar, str):
        return polar
    cl, cd = polar
    if not cd > 0:
        return f"xfoil returned a drag coefficient of {cd}"
    section = area(shape)
    x_crest, z_crest = crest(params)
    return {
        "objective": objective(cd, cl, section),
        "measure_1": x_crest,
        "measure_2": z_crest,
        "cd": cd,
        "cl": cl,
        "area": section,
    }


def read_dakota_parameters(path):
    """The variables of a Dakota parameters file (standard format), in file order."""
    lines = Path(path).read_text().splitlines()
    count = int(lines[0].split()[0])
    return [float(line.split()[0]) for line in lines[1 : 1 + count]]


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: xfoil_driver.py PARAMETERS_FILE RESULTS_FILE")
    results = evaluate(read_dakota_parameters(argv[1]))
    text = (
        f"fail {results}\n"
        if isinstance(results, str)
        else "".join(f"{value!r} {label}\n" for label, value in results.items())
    )
    Path(argv[2]).write_text(text)


if __name__ == "__main__":
    main(sys.argv)
