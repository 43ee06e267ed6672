"""Reading what earlier versions of evocamp wrote.

- Checkpoints of schema versions 1 and 2 (QD runs only) hold the pyribs scheduler
  alone, as a plain (1) or compact (2) pickle; :func:`wrapped_scheduler` puts it
  behind today's optimizer protocol, and keep the next batch (always its solutions)
  and its seeds under ``/next_batch`` (:func:`old_next_batch`);
  ``files/checkpoint.py`` enters this module only for a file of such a version.
- Pickles name classes by module; :data:`MOVED_MODULES` maps the modules of version
  0.1's flat package to where their classes live now, so checkpoints written before
  the package was layered still resume, and :data:`MOVED_CLASSES` the classes of
  ``evocamp.families.qd`` (one module until it was split into a package) to their
  modules now (:func:`class_module` applies both).
"""

from __future__ import annotations

from evocamp.families.qd.optimizer import QDOptimizer

#: Module of a pickled class in evocamp 0.1 -> its module now.
MOVED_MODULES = {
    "evocamp.algorithms": "evocamp.families.qd",
    "evocamp.es": "evocamp.families.es",
    "evocamp.bo": "evocamp.families.bo",
    "evocamp.baselines": "evocamp.families.baselines",
    "evocamp.storage": "evocamp.files.checkpoint",
}

#: ``(module, class)`` of a class of ``evocamp.families.qd`` when it was one module (the
#: flat package's ``evocamp.algorithms`` maps to it first) -> its module now.
MOVED_CLASSES = {
    ("evocamp.families.qd", name): f"evocamp.families.qd.{module}"
    for module, names in {
        "optimizer": ("QDOptimizer",),
        "batches": ("QDBatch",),
        "compact": ("ArchiveElites", "_RecordingGenerator"),
        "components": ("ArchiveKind", "EmitterKind", "SchedulerKind", "QDRecipe"),
    }.items()
    for name in names
}


def class_module(module: str, name: str) -> str:
    """The module that holds now the class a pickle names as ``module.name``."""
    module = MOVED_MODULES.get(module, module)
    return MOVED_CLASSES.get((module, name), module)


def wrapped_scheduler(scheduler) -> tuple[QDOptimizer, object]:
    """A version-1/2 checkpoint's scheduler behind the optimizer protocol, and its
    result archive."""
    optimizer = QDOptimizer(scheduler)
    return optimizer, optimizer.archive


def old_next_batch(handle) -> tuple[dict, object]:
    """A schema 1-2 state file's next batch (always ``/next_batch/solutions``: QD runs
    only) and its evaluation seeds (``/next_batch/seeds``), as h5py datasets."""
    return {"solutions": handle["next_batch/solutions"]}, handle["next_batch/seeds"]
