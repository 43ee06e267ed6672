"""Seed derivation: one master seed fixes every random number of a campaign.

Every stream is a :class:`numpy.random.SeedSequence` whose entropy is the master
seed and whose spawn key names what the stream is for. Streams therefore do not
depend on the order in which runs, generations or shards are executed, nor on how
a generation's batch is split into shards.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from dataclasses import dataclass

import numpy as np

#: Spawn-key tags: the first element after the run key says what a stream is for.
OPTIMIZER_STREAM = 0
EVALUATION_STREAM = 1
DOMAIN_STREAM = 2
#: Evaluation seeds of asynchronous runs (numbered evaluations, no generations).
ASYNCHRONOUS_EVALUATION_STREAM = 3
#: Asynchronous evaluation seeds are drawn in blocks of this many words.
SEED_BLOCK = 1024
#: Seeds of the final re-evaluation of a run's elites (``evaluation.reevaluate``).
REEVALUATION_STREAM = 4
#: A run's initial points (a domain's ``x0: random``), one per restart.
INITIAL_POINT_STREAM = 5
#: Spawn key, under one evaluation seed, of the seeds of its repeats
#: (``evaluation.repeats``; ``(1,)`` is the simulated evaluation time's).
REPEAT_KEY = (2,)


@functools.lru_cache(maxsize=1024)
def name_key(name: str) -> int:
    """Return a stable 32-bit integer for a name (same on every machine and run; each
    name hashed once per process: the tell asks for its run's every generation)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def run_key(*, algorithm: str, domain: str, seed: int) -> tuple[int, int, int]:
    """Return the spawn-key prefix that identifies one run of a campaign."""
    return (name_key(algorithm), name_key(domain), int(seed))


def optimizer_seeds(master_seed: int, key: tuple[int, ...], count: int) -> list[int]:
    """Return ``count`` integer seeds for the archive and emitters of one run."""
    sequence = np.random.SeedSequence(master_seed, spawn_key=(*key, OPTIMIZER_STREAM))
    return [int(s) for s in sequence.generate_state(count, dtype=np.uint32)]


def evaluation_seeds(
    master_seed: int, key: tuple[int, ...], generation: int, count: int
) -> np.ndarray:
    """Return one uint64 seed per solution of a generation's batch.

    Solution ``i`` of generation ``g`` gets word ``i`` of
    ``SeedSequence(master_seed, spawn_key=(*key, EVALUATION_STREAM, g))``. Words do
    not depend on how many are drawn (``generate_state(n)[:k] == generate_state(k)``),
    so a solution's seed is the same whichever shard evaluates it and whatever the
    batch size. The same words are computed here without numpy's loops (its
    ``SeedSequence`` mixes the key, then hashes one word at a time: 0.1 ms for 1,000
    solutions, against 0.01 ms here and 0.23 s for a SeedSequence per solution): the
    run's key mixed once per process, a generation's number mixed into it in Python,
    its words hashed with array operations, checked against numpy once per process
    (another numpy whose SeedSequence differs gets its own).
    """
    spawn_key = (*key, EVALUATION_STREAM, generation)
    pool = _pool(master_seed, spawn_key) if count and _ours_match() else None
    if pool is None:
        sequence = np.random.SeedSequence(master_seed, spawn_key=spawn_key)
        return sequence.generate_state(count, dtype=np.uint64)
    return _hashed(pool, count)


# SeedSequence's constants (numpy's ``bit_generator.pyx``, O'Neill's seed_seq_fe), on
# uint32 words: mixing the entropy into the pool of 4 (``hashmix`` with INIT_A,
# MULT_A; ``mix`` with MIX_MULT_L, MIX_MULT_R) and the output hash (word ``i`` is
# ``((pool[i % 4] ^ h_i) * h_(i+1)) ^ (... >> 16)``, ``h_0 = INIT_B``,
# ``h_(i+1) = h_i * MULT_B``).
_MASK = 0xFFFFFFFF
_INIT_A, _MULT_A, _MIX_L, _MIX_R = 0x43B0D7E5, 0x931E8875, 0xCA01F9DD, 0x4973F715
_INIT_B, _MULT_B, _XSHIFT = 0x8B51F9DD, 0x58F38DED, np.uint32(16)


def _words(value: int) -> list[int]:
    """A non-negative integer as SeedSequence takes it: 32-bit words, lowest first."""
    words = [value & _MASK]
    while value := value >> 32:
        words.append(value & _MASK)
    return words


def _pool(master_seed: int, spawn_key: tuple[int, ...]) -> np.ndarray | None:
    """``SeedSequence(master_seed, spawn_key=spawn_key).pool``: the key but its last
    element mixed once per process, the last one here; ``None`` for a negative."""
    if master_seed < 0 or min(spawn_key) < 0:
        return None
    pool, constant = _mixed_prefix(master_seed, spawn_key[:-1])
    pool = list(pool)
    for word in _words(int(spawn_key[-1])):
        for d in range(4):
            word_hash = word ^ constant
            constant = (constant * _MULT_A) & _MASK
            word_hash = (word_hash * constant) & _MASK
            word_hash ^= word_hash >> 16
            mixed = (_MIX_L * pool[d] - _MIX_R * word_hash) & _MASK
            pool[d] = mixed ^ (mixed >> 16)
    return np.array(pool, dtype=np.uint32)


@functools.lru_cache(maxsize=256)
def _mixed_prefix(master_seed: int, prefix: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """The pool and hash constant of SeedSequence's mixing after the master seed's
    words (padded to the pool's 4, as with a spawn key) and ``prefix``'s (integers of any
    type: a numpy integer is the same key as Python's, cached once)."""
    entropy = _words(int(master_seed))
    entropy += [0] * (4 - len(entropy))
    for element in prefix:
        entropy += _words(int(element))
    constant = _INIT_A

    def hashed(value: int) -> int:
        nonlocal constant
        value ^= constant
        constant = (constant * _MULT_A) & _MASK
        value = (value * constant) & _MASK
        return value ^ (value >> 16)

    def mixed(x: int, y: int) -> int:
        result = (_MIX_L * x - _MIX_R * y) & _MASK
        return result ^ (result >> 16)

    pool = [hashed(word) for word in entropy[:4]]
    for source in range(4):
        for target in range(4):
            if source != target:
                pool[target] = mixed(pool[target], hashed(pool[source]))
    for word in entropy[4:]:
        for target in range(4):
            pool[target] = mixed(pool[target], hashed(word))
    return tuple(pool), constant


def _hashed(pool: np.ndarray, count: int) -> np.ndarray:
    """``count`` uint64 words of SeedSequence's output hash of ``pool`` (4 uint32)."""
    words = 2 * count
    constants = _hash_constants(words)
    cycles = -(-words // len(pool))
    data = np.bitwise_xor(constants[: cycles * len(pool)].reshape(cycles, -1), pool)
    data = data.reshape(-1)[:words]
    data *= constants[1 : words + 1]
    data ^= data >> _XSHIFT
    # As numpy: the uint32 words read as little-endian uint64, in native order.
    if sys.byteorder == "little":
        return data.view(np.uint64)
    return data.astype("<u4").view("<u8").astype(np.uint64)


def _hash_constants(words: int) -> np.ndarray:
    """``h_0 .. h_n`` for at least ``n = words`` (+ a pool's cycle), from a cache that
    doubles when a larger batch asks."""
    size = max(1024, 1 << (words + 4).bit_length())
    return _constants_of(size)


@functools.lru_cache(maxsize=8)
def _constants_of(size: int) -> np.ndarray:
    factors = np.full(size, _MULT_B, dtype=np.uint32)
    factors[0] = _INIT_B
    constants = np.cumprod(factors, dtype=np.uint32)
    constants.setflags(write=False)
    return constants


@functools.cache
def _ours_match() -> bool:
    """Whether :func:`_pool` and :func:`_hashed` give this numpy's SeedSequence pools
    and ``generate_state`` words (probed on keys of one and several words)."""
    for master_seed, spawn_key in ((20261127, (7, 9, 1, 3)), (2**40 + 5, (2**33, 1, 2**32 - 1))):
        sequence = np.random.SeedSequence(master_seed, spawn_key=spawn_key)
        ours = _pool(master_seed, spawn_key)
        if not np.array_equal(ours, sequence.pool) or not np.array_equal(
            _hashed(ours, 257), sequence.generate_state(257, np.uint64)
        ):
            return False
    return True


def repeat_seeds(seeds: np.ndarray, repeats: int) -> np.ndarray:
    """Return the ``(len(seeds), repeats)`` uint64 seeds of the repeats of each evaluation.

    Row ``i`` is ``SeedSequence(seeds[i], spawn_key=REPEAT_KEY).generate_state(repeats)``:
    a function of the solution's evaluation seed alone, so its repeats get the same
    seeds whichever shard, Dask task or slot evaluates it.
    """
    words = np.empty((len(seeds), repeats), dtype=np.uint64)
    for row, seed in enumerate(np.asarray(seeds, dtype=np.uint64)):
        sequence = np.random.SeedSequence(int(seed), spawn_key=REPEAT_KEY)
        words[row] = sequence.generate_state(repeats, dtype=np.uint64)
    return words


def reevaluation_seeds(master_seed: int, key: tuple[int, ...], count: int) -> np.ndarray:
    """Return one uint64 seed per elite of a run's final re-evaluation (elites in the
    archive's index order): word ``i`` of
    ``SeedSequence(master_seed, spawn_key=(*key, REEVALUATION_STREAM))``; each elite's
    repeats then get :func:`repeat_seeds` of it."""
    sequence = np.random.SeedSequence(master_seed, spawn_key=(*key, REEVALUATION_STREAM))
    return sequence.generate_state(count, dtype=np.uint64)


def initial_population_rng(emitter_seed: int) -> np.random.Generator:
    """The stream of one QD emitter's initial solutions (``initial_population: random``):
    ``SeedSequence(emitter_seed, spawn_key=(name_key("initial_population"),))``, apart
    from the streams pyribs derives from the emitter's seed (the seed itself and its
    first spawned children), and fixed by the master seed as the emitter's seed is."""
    return np.random.default_rng(
        np.random.SeedSequence(emitter_seed, spawn_key=(name_key("initial_population"),))
    )


@dataclass(frozen=True)
class RandomStart:
    """A run's initial points drawn uniformly in ``[low, high]^dim`` (a domain's ``x0:
    random``): point ``restart`` is ``uniform(low, high, dim)`` of
    ``SeedSequence(master_seed, spawn_key=(*key, INITIAL_POINT_STREAM, restart))``, a
    function of the run and the restart's number alone, so a run resumed from a
    checkpoint draws what it would have drawn. Restart 0 is the run's ``x0``; an
    optimizer that restarts (the ``pycma`` family) calls it with the restart's number,
    as BBOB-2009's BIPOP-CMA-ES drew every restart's ``x0`` anew."""

    master_seed: int
    key: tuple[int, ...]
    low: float
    high: float
    dim: int

    def __call__(self, restart: int = 0) -> np.ndarray:
        sequence = np.random.SeedSequence(
            self.master_seed, spawn_key=(*self.key, INITIAL_POINT_STREAM, int(restart))
        )
        return np.random.default_rng(sequence).uniform(self.low, self.high, self.dim)


def domain_rng(master_seed: int, domain: str) -> np.random.Generator:
    """A generator shared by every run of a campaign on domain ``domain`` (e.g. the CQD
    score's target points, the same for every algorithm and seed)."""
    return np.random.default_rng(
        np.random.SeedSequence(master_seed, spawn_key=(name_key(domain), DOMAIN_STREAM))
    )


def asynchronous_evaluation_seeds(
    master_seed: int, key: tuple[int, ...], evaluations: np.ndarray
) -> np.ndarray:
    """Return the uint64 seed of each numbered evaluation of an asynchronous run.

    Evaluation ``e`` gets word ``e % SEED_BLOCK`` of
    ``SeedSequence(master_seed, spawn_key=(*key, ASYNCHRONOUS_EVALUATION_STREAM,
    e // SEED_BLOCK))``: the same whichever worker evaluates it and whenever.
    """
    evaluations = np.asarray(evaluations, dtype=np.int64)
    seeds = np.empty(len(evaluations), dtype=np.uint64)
    for block in np.unique(evaluations // SEED_BLOCK):
        words = _seed_block(int(master_seed), tuple(int(k) for k in key), int(block))
        inside = evaluations // SEED_BLOCK == block
        seeds[inside] = words[evaluations[inside] % SEED_BLOCK]
    return seeds


@functools.lru_cache(maxsize=64)
def _seed_block(master_seed: int, key: tuple[int, ...], block: int) -> np.ndarray:
    """One block of asynchronous evaluation seeds (drawn once per process: an
    asynchronous run asks for one seed per completion)."""
    sequence = np.random.SeedSequence(
        master_seed, spawn_key=(*key, ASYNCHRONOUS_EVALUATION_STREAM, block)
    )
    words = sequence.generate_state(SEED_BLOCK, dtype=np.uint64)
    words.setflags(write=False)
    return words
