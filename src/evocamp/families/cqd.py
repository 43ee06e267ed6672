"""The CQD score (Kent & Branke 2023) of a run's archive, whatever its family, and its
settings (:func:`cqd_settings`: targets drawn from the master seed). pyribs is imported
inside :func:`cqd_score`."""

from __future__ import annotations

import numpy as np

from evocamp.base.seeding import domain_rng


def cqd_score(
    archive,
    *,
    target_points: np.ndarray,
    penalties: int | list,
    obj_min: float,
    obj_max: float,
    dist_max: float,
) -> float:
    """The CQD score (Kent & Branke 2023) of an archive, with pyribs'
    :func:`ribs.archives.cqd_score`: the mean over the sets of ``target_points``
    (iterations x n x measures) of the sum, over targets and penalties theta, of the best
    ``(f - obj_min) / (obj_max - obj_min) - theta d / dist_max`` among the elites (``d``:
    their distance to the target). pyribs normalises ``f / (obj_max - obj_min)`` without
    shifting by ``obj_min``; the shift (a constant per target and penalty) is added here,
    so that objectives normalised to [0, 1] give scores that do not depend on where the
    objective's range lies."""
    from ribs.archives import cqd_score as ribs_cqd_score

    if archive.empty:
        return float("nan")
    result = ribs_cqd_score(
        archive,
        iterations=len(target_points),
        target_points=target_points,
        penalties=penalties,
        obj_min=obj_min,
        obj_max=obj_max,
        dist_max=dist_max,
    )
    shift = -obj_min / (obj_max - obj_min) * target_points.shape[1] * len(result.penalties)
    return float(result.mean + shift)


#: Defaults of the CQD score's settings (``domains.NAME.cqd``).
CQD_DEFAULTS = {"target_points": 200, "iterations": 1, "penalties": 5}


def cqd_settings(spec: dict, *, objective_max: float | None) -> dict | None:
    """The arguments of :func:`cqd_score` for a run, or ``None`` when
    the run gets no CQD score (no grid archive, no measures, an unknown best objective,
    or ``cqd.target_points: 0``).

    Defaults (:data:`CQD_DEFAULTS`; ``domains.NAME.cqd`` overrides each): target points
    drawn uniformly within the measure ranges from the master seed and the domain's
    name (the same for every algorithm and seed of the campaign), ``obj_min`` the
    archive's QD score offset, ``obj_max`` the domain's best objective
    (``objective_max``, its catalogue entry's: :func:`evocamp.catalogue.domains.objective_max`),
    ``dist_max`` the diagonal of the measure ranges.
    """
    domain = spec["domain_spec"]
    given = {**CQD_DEFAULTS, **(domain.get("cqd") or {})}
    obj_max = given.get("obj_max", objective_max)
    grid = "dims" in spec["algorithm_spec"]["archive"]  # the run's archive is a grid
    if not (grid and domain.get("measure_ranges")):
        return None
    if obj_max is None or not given["target_points"]:
        return None
    ranges = np.asarray(domain["measure_ranges"], dtype=np.float64)
    rng = domain_rng(spec["master_seed"], spec["domain"])
    targets = rng.uniform(
        ranges[:, 0], ranges[:, 1], size=(given["iterations"], given["target_points"], len(ranges))
    )
    return {
        "target_points": targets,
        "penalties": given["penalties"],
        "obj_min": given.get(
            "obj_min", spec["algorithm_spec"]["archive"].get("qd_score_offset", 0.0)
        ),
        "obj_max": obj_max,
        "dist_max": given.get("dist_max", float(np.linalg.norm(ranges[:, 1] - ranges[:, 0]))),
    }
