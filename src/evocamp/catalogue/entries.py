"""What an algorithm type is: :class:`AlgorithmType` (one per ``algorithms.NAME.type``),
its :class:`Family`, the optional :class:`Extra` it or a domain needs, and
:class:`Derived` defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from evocamp.families.qd.components import QDRecipe
from evocamp.model.protocol import BatchFormat, batch_format_of


@dataclass(frozen=True)
class Family:
    """A family of algorithm types (``AlgorithmType.family``), declared once beside its
    types' entries; :data:`evocamp.catalogue.algorithms.FAMILIES` is the table of every
    family, built from the entries.

    Attributes
    ----------
    name : str
        ``qd``, ``es``, ``bo``, ``baseline``, ``plugin`` or a library's family (``pycma``).
    title : str
        How the documentation's tables name it.
    """

    name: str
    title: str


@dataclass(frozen=True)
class Extra:
    """An optional dependency group of evocamp (``pip install 'evocamp[NAME]'``, the
    extra of ``pyproject.toml`` of that name), declared beside the entries that need it.

    Attributes
    ----------
    name : str
        The extra's name in ``pyproject.toml``.
    requires : tuple
        ``(distribution, low, below)``: each distribution a run checks before it starts,
        with the versions that keep results reproducible (``low <= version < below``,
        each a tuple of ints); a campaign is refused, with the ``pip`` command, when
        one is missing or of another version
        (:func:`evocamp.catalogue.factory.missing_extra`).
    numeric : tuple of str
        The distributions whose versions decide the numbers of the runs that use the
        extra: recorded after :data:`evocamp.model.numerics.NUMERIC_PACKAGES` in those
        runs' numeric provenance only (:func:`evocamp.catalogue.factory.run_packages`).
    """

    name: str
    requires: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]
    numeric: tuple[str, ...] = ()


@dataclass(frozen=True)
class Derived:
    """A default computed from the resolved domain (e.g. SNES's population from the
    solution dimension); ``text`` is how the documentation states it."""

    compute: Callable[[dict], object]
    text: str


@dataclass(frozen=True)
class SpecName:
    """A key that the run spec stores under another name.

    QD types' ``emitter_batch_size`` is stored as ``batch_size`` (pyribs' name): run
    specs written before the key was renamed, and the kept checkpoints matched to runs
    by them, stay the same. An entry that writes the stored name is read as the key,
    with one line saying what to write instead.

    Attributes
    ----------
    key : str
        The configuration key.
    stored : str
        Its name in the run spec (and the old configuration key).
    meaning : str
        What the stored name means for the type, for the line (e.g. ``per emitter``).
    """

    key: str
    stored: str
    meaning: str


@dataclass(frozen=True)
class AlgorithmType:
    """One algorithm type.

    Attributes
    ----------
    name : str
        The ``type`` value.
    family : Family
        Its family (``qd``, ``es``, ``bo``, ``baseline``, ``plugin`` or a library's).
    summary : str
        One line for the documentation.
    reference : str
        Where it comes from (paper or library).
    defaults : dict
        Every optional key with its default (a value or a :class:`Derived`), filled into
        the run spec. Together with ``optional`` these are the keys the type accepts
        (besides ``type`` and ``archive``).
    optional : tuple of str
        Accepted keys without a default.
    required : tuple of str
        Keys that must be given.
    params : tuple of str
        Keys passed to the class as keyword arguments (besides ``solution_dim``,
        ``x0``, ``bounds`` and ``seed``).
    cls : type or None
        The optimizer class (``None`` for plugins: the ``class`` key names it).
    recipe : QDRecipe or None
        QD types: the pyribs components; the class is :class:`QDOptimizer`, whose
        archive is the run's archive (other families fill a passive archive).
    generation_size : callable or None
        Solutions per generation, from the resolved algorithm spec (``None``: the class
        decides, as plugins do).
    needs_measures : bool
        The type needs a domain with measures (QD).
    needs_bounds : bool
        The type samples within the domain's bounds (it keeps them on a domain with
        ``bounded: false``, which the others then run unbounded).
    redraws_x0 : bool
        The type restarts from a new initial point: on a domain with ``x0: random`` its
        class gets ``restart_x0=`` (:class:`~evocamp.base.seeding.RandomStart`) and draws
        restart ``k``'s from it.
    takes_space : bool
        The type samples and proposes in a domain's search space (``space``): its class
        gets the space's parameters as ``space=`` (:mod:`evocamp.model.space`); types
        without it need a continuous box and refuse a domain with a space.
    grid_archive : bool
        The run's (or passive) archive is a grid with ``archive.dims``.
    archive_defaults : dict
        Defaults of ``archive.*`` keys particular to the type.
    shards_in_spec : bool
        The shard count is part of the algorithm (every shard is one worker).
    async_refusal : str or None
        Why the type cannot run in asynchronous mode (``mode: async``), or ``None``
        when it can (its class has ``ask_async`` and ``tell_async``; plugins are checked
        for them).
    extra : Extra or None
        The optional dependency group of evocamp the type needs (``pip install
        'evocamp[NAME]'``): a campaign using the type is refused, with that command,
        when one of its distributions is missing.
    rules : tuple of callable
        Checks of the type's keys that the schema cannot express: each takes the
        algorithm entry and returns ``(key, problem)`` or ``None`` (e.g. OpenAI-ES's
        even ``popsize``).
    noise_seed_rows : bool
        Kept evaluations hold each offspring's noise seed instead of the solution: the
        batches are a centre and noise seeds, from which the offspring regenerate.
    keeps_evaluations : bool
        ``storage.keep_evaluations: auto`` keeps every evaluation of the type, whatever their
        size (Bayesian optimisation: the evaluations are the surrogate's data).
    spec_names : tuple of SpecName
        Keys the run spec stores under another name (QD: ``emitter_batch_size`` as
        ``batch_size``).
    key_shapes : dict
        JSON schema of each key that no type of the schema file accepts (a library
        family's own, e.g. IPOP's ``incpopsize``), added to the schema's algorithm keys
        when it is loaded (:func:`evocamp.config.load_schema`), as the type lists are:
        a family from another library needs no edit of the schema file.
    batch_format : BatchFormat or None
        How its class's batches are sized and materialised, made once with the entry
        (:func:`~evocamp.model.protocol.batch_format_of`; ``None`` for plugins, whose
        class a run names: :func:`~evocamp.catalogue.factory.resolve_run` makes theirs).
    """

    name: str
    family: Family
    summary: str
    reference: str = ""
    defaults: dict = field(default_factory=dict)
    optional: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    cls: type | None = None
    recipe: QDRecipe | None = None
    generation_size: Callable[[dict], int] | None = None
    needs_measures: bool = False
    needs_bounds: bool = False
    redraws_x0: bool = False
    takes_space: bool = False
    grid_archive: bool = True
    archive_defaults: dict = field(default_factory=dict)
    shards_in_spec: bool = False
    async_refusal: str | None = "it has no asynchronous (steady-state) form"
    extra: Extra | None = None
    rules: tuple[Callable[[dict], tuple[str, str] | None], ...] = ()
    noise_seed_rows: bool = False
    keeps_evaluations: bool = False
    spec_names: tuple[SpecName, ...] = ()
    key_shapes: dict = field(default_factory=dict)
    batch_format: BatchFormat | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        made = None if self.cls is None else batch_format_of(self.cls, name=self.name)
        object.__setattr__(self, "batch_format", made)

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key the type accepts besides ``type`` and ``archive``."""
        return (*self.defaults, *self.optional, *self.required)

    @property
    def spec_keys(self) -> tuple[str, ...]:
        """:attr:`keys` as the run spec names them (:attr:`spec_names`)."""
        stored = {name.key: name.stored for name in self.spec_names}
        return tuple(stored.get(key, key) for key in self.keys)

    def as_stored(self, algorithm: dict) -> dict:
        """An algorithm entry with its keys named as the run spec stores them, in the
        same order."""
        stored = {name.key: name.stored for name in self.spec_names}
        return {stored.get(key, key): value for key, value in algorithm.items()}

    def key_problems(self, algorithm: dict) -> list[tuple[str, str]]:
        """``(key, problem)`` of every rule of :attr:`rules` the algorithm entry breaks."""
        return [found for rule in self.rules if (found := rule(algorithm)) is not None]
