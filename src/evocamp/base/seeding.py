"""Seed derivation: one master seed fixes every random number of a campaign.

Every stream is a :class:`numpy.random.SeedSequence` whose entropy is the master
seed and whose spawn key names what the stream is for. Streams therefore do not
depend on the order in which runs, generations or shards are executed, nor on how
a generation's batch is split into shards.
"""

from __future__ import annotations

import functools
import hashlib

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
    batch size; one sequence per generation, its words computed at once
    (:func:`sequence_words`: 0.01 ms for 1,000 solutions, against 0.1 ms for
    ``generate_state``'s loop and 0.23 s for a SeedSequence per solution).
    """
    sequence = np.random.SeedSequence(master_seed, spawn_key=(*key, EVALUATION_STREAM, generation))
    return sequence_words(sequence, count)


#: SeedSequence's output hash (numpy's ``bit_generator.pyx``, O'Neill's seed_seq_fe):
#: word ``i`` is ``((pool[i % 4] ^ h_i) * h_(i+1)) ^ (... >> 16)`` in uint32, with
#: ``h_0 = INIT_B`` and ``h_(i+1) = h_i * MULT_B``.
_INIT_B, _MULT_B, _XSHIFT = 0x8B51F9DD, 0x58F38DED, np.uint32(16)
#: Words below this many are left to ``generate_state`` (its loop is cheaper than the
#: arrays' set-up).
_FEW_WORDS = 64


def sequence_words(sequence: np.random.SeedSequence, count: int) -> np.ndarray:
    """``sequence.generate_state(count, dtype=np.uint64)``, the same words computed with
    array operations instead of numpy's loop of one word at a time (checked against it
    once per process: another numpy whose hash differs gets its own loop)."""
    if 2 * count < _FEW_WORDS or not _hash_matches():
        return sequence.generate_state(count, dtype=np.uint64)
    return _hashed(sequence.pool, count)


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
    return data.astype("<u4", copy=False).view("<u8").astype(np.uint64, copy=False)


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
def _hash_matches() -> bool:
    """Whether :func:`_hashed` gives this numpy's ``generate_state`` words."""
    probe = np.random.SeedSequence(20261127, spawn_key=(EVALUATION_STREAM, 3))
    return bool(np.array_equal(_hashed(probe.pool, 257), probe.generate_state(257, np.uint64)))


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
