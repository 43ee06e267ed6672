"""Step settings: what the workflow tells every step that is no part of the run spec.

Some campaign keys change no result, so they are no part of the run spec (changing
them neither invalidates kept checkpoints nor reruns a rule): the run's length
(``generations``, for the progress lines and the window rules), the failure limit
(``evaluation.max_failed_fraction``: it only stops a run), how kept checkpoints store
their archive (``checkpoint_full_every``), what is kept of the evaluations
(``storage``), how many evaluations of a shard run at once, with how many GPUs each
(``evaluation.concurrency``, ``evaluation.gpus_per_evaluation``: the allocation's, not
the results'), and where and how each ``type: command`` domain's program runs here
(its ``work_root``, ``keep_work``, ``keep_work_max`` and ``launcher``:
:data:`~evocamp.tasks.program_keys.LOCAL_KEYS`). They reach a step through one
channel: one environment variable, :data:`STEP_VARIABLE`, holding
:class:`StepSettings` as JSON, which the workflow's shell prefix exports to every job
(``workflow/rules/common.smk``) and which is read here only
(:meth:`StepSettings.current`). A step run by hand without it uses the defaults;
``--total`` and ``--full-every`` override them on its command line.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field

from evocamp.files.evaluations import StorageSettings
from evocamp.model.runspec import COMMAND
from evocamp.tasks.program_keys import LOCAL_KEYS

#: The environment variable that carries the step settings (JSON) to every step; a
#: step process that has it was started by the workflow.
STEP_VARIABLE = "EVOCAMP_STEP"

#: ``evaluation.max_failed_fraction``'s default (the schema's).
DEFAULT_MAX_FAILED_FRACTION = 0.5


@dataclass(frozen=True)
class StepSettings:
    """The settings every step of a campaign's runs reads (none of them a part of
    the run spec).

    Attributes
    ----------
    generations : int or None
        The run's generations (``None``: unknown).
    max_failed_fraction : float
        ``evaluation.max_failed_fraction``: the share of failed evaluations, of a
        generation's or of the run's so far, above which the run stops.
    full_every : int
        ``checkpoint_full_every``: a kept checkpoint's archive may be a delta of the
        previous kept one, in full at least every this many (1: always in full).
    storage : StorageSettings
        What to keep of the evaluations (the ``storage`` keys).
    concurrency : int
        ``evaluation.concurrency``: evaluations (calls) of a shard run at once (Dask
        and asynchronous modes: evaluation tasks a Dask worker runs at once).
    gpus_per_evaluation : int
        ``evaluation.gpus_per_evaluation``: GPUs each concurrent evaluation gets
        (its own ``CUDA_VISIBLE_DEVICES``; 0: none set).
    programs : dict
        By domain name, the :data:`~evocamp.tasks.program_keys.LOCAL_KEYS` a
        ``type: command`` domain sets (where its work directories go, which are
        kept, its launcher); domains that set none are left out.
    """

    generations: int | None = None
    max_failed_fraction: float = DEFAULT_MAX_FAILED_FRACTION
    full_every: int = 1
    storage: StorageSettings = field(default_factory=StorageSettings)
    concurrency: int = 1
    gpus_per_evaluation: int = 0
    programs: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: dict) -> StepSettings:
        """The settings of a validated campaign configuration."""
        return cls(
            generations=int(config["generations"]),
            max_failed_fraction=float(config["evaluation"]["max_failed_fraction"]),
            full_every=int(config["checkpoint_full_every"]),
            storage=StorageSettings.from_config(config),
            concurrency=int(config["evaluation"].get("concurrency", 1)),
            gpus_per_evaluation=int(config["evaluation"].get("gpus_per_evaluation", 0)),
            programs=_local_keys(config["domains"]),
        )

    def to_json(self) -> str:
        """The settings as :data:`STEP_VARIABLE` carries them."""
        return json.dumps(
            {
                "generations": self.generations,
                "max_failed_fraction": self.max_failed_fraction,
                "full_every": self.full_every,
                "storage": json.loads(self.storage.to_json())["storage"],
                "concurrency": self.concurrency,
                "gpus_per_evaluation": self.gpus_per_evaluation,
                "programs": self.programs,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> StepSettings:
        """The settings :meth:`to_json` wrote."""
        stored = json.loads(text)
        return cls(
            generations=stored["generations"],
            max_failed_fraction=float(stored["max_failed_fraction"]),
            full_every=int(stored["full_every"]),
            storage=StorageSettings.from_config({"storage": stored["storage"]}),
            concurrency=int(stored.get("concurrency", 1)),
            gpus_per_evaluation=int(stored.get("gpus_per_evaluation", 0)),
            programs=stored.get("programs", {}),
        )

    @classmethod
    def current(cls) -> StepSettings:
        """This step's settings: :data:`STEP_VARIABLE`'s, else the defaults (read
        each time: a warm-started step takes its caller's environment; parsed once per
        text, as Dask mode's segments ask every generation)."""
        return _settings_of(os.environ.get(STEP_VARIABLE, ""))


def _local_keys(domains: dict) -> dict[str, dict]:
    """By domain name, the local keys each ``type: command`` domain sets."""
    found = {
        name: {key: domain[key] for key in LOCAL_KEYS if key in domain}
        for name, domain in domains.items()
        if domain.get("type") == COMMAND
    }
    return {name: keys for name, keys in found.items() if keys}


@functools.lru_cache(maxsize=8)
def _settings_of(text: str) -> StepSettings:
    """The (frozen) settings a :data:`STEP_VARIABLE` text holds; the defaults for none."""
    return StepSettings.from_json(text) if text else StepSettings()
