"""Evolution strategies: each update equals a direct numpy computation of its formula,
offspring regenerate from seeds the same in any slice, and shards never get P x M."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evocamp.catalogue.factory import resolve_run
from evocamp.families import es


def returns_of(offspring: np.ndarray) -> np.ndarray:
    """A deterministic toy return: minus the distance to (1, ..., 1)."""
    return -np.sum((offspring - 1.0) ** 2, axis=1)


def test_openai_es_update_is_the_papers_formula():
    """Antithetic offspring, centred ranks over all 2n returns, g = sum (r+ - r-) eps /
    (2 n sigma), weight decay, then Adam as in the authors' code, two generations."""
    dim, pairs, sigma, lr, decay = 5, 3, 0.1, 0.05, 0.01
    optimizer = es.OpenAIES(
        solution_dim=dim,
        x0=np.linspace(-1, 1, dim),
        bounds=None,
        seed=11,
        popsize=2 * pairs,
        sigma=sigma,
        learning_rate=lr,
        weight_decay=decay,
    )
    theta = np.linspace(-1, 1, dim)
    m = np.zeros(dim)
    v = np.zeros(dim)
    for t in (1, 2):
        batch = optimizer.ask()
        eps = np.stack([np.random.default_rng(int(s)).standard_normal(dim) for s in batch["noise"]])
        offspring = np.empty((2 * pairs, dim))
        offspring[0::2] = theta + sigma * eps
        offspring[1::2] = theta - sigma * eps
        assert np.array_equal(es.OpenAIESBatch.solutions(batch, 0, 2 * pairs), offspring)
        returns = returns_of(offspring)
        ranks = np.argsort(np.argsort(returns)).astype(float)
        shaped = ranks / (2 * pairs - 1) - 0.5
        g = np.sum((shaped[0::2] - shaped[1::2])[:, None] * eps, axis=0) / (2 * pairs * sigma)
        direction = g - decay * theta
        m = 0.9 * m + 0.1 * direction
        v = 0.999 * v + 0.001 * direction**2
        theta = theta + lr * math.sqrt(1 - 0.999**t) / (1 - 0.9**t) * m / (np.sqrt(v) + 1e-8)
        optimizer.tell(returns)
        np.testing.assert_allclose(optimizer.centre, theta, rtol=1e-12, atol=1e-15)
        theta = optimizer.centre.copy()  # the next generation starts from the same bits


def test_snes_update_is_the_papers_formula():
    """mu += eta_mu sigma sum u_k s_k; sigma *= exp(eta_sigma / 2 sum u_k (s_k^2 - 1)),
    with the NES utilities and the default lambda and eta_sigma."""
    dim = 7
    lam = 4 + math.floor(3 * math.log(dim))
    eta_sigma = (3 + math.log(dim)) / (5 * math.sqrt(dim))
    assert es.snes_popsize(dim) == lam and es.snes_eta_sigma(dim) == eta_sigma
    optimizer = es.SNES(
        solution_dim=dim, x0=np.zeros(dim), bounds=None, seed=5, popsize=lam, sigma=0.7
    )
    mu, sig = np.zeros(dim), np.full(dim, 0.7)
    raw = np.maximum(0, np.log(lam / 2 + 1) - np.log(np.arange(1, lam + 1)))
    utilities = raw / raw.sum() - 1 / lam
    for _ in range(3):
        batch = optimizer.ask()
        s = np.stack(
            [np.random.default_rng(int(seed)).standard_normal(dim) for seed in batch["noise"]]
        )
        offspring = mu + sig * s
        assert np.array_equal(es.SNESBatch.solutions(batch, 0, lam), offspring)
        returns = returns_of(offspring)
        u = np.empty(lam)
        u[np.argsort(-returns)] = utilities  # best gets u_1
        mu = mu + 1.0 * sig * (u @ s)
        sig = sig * np.exp(eta_sigma / 2 * (u @ (s**2 - 1)))
        optimizer.tell(returns)
        np.testing.assert_allclose(optimizer.centre, mu, rtol=1e-12)
        np.testing.assert_allclose(optimizer.sigma, sig, rtol=1e-12)
        mu, sig = optimizer.centre.copy(), optimizer.sigma.copy()
    assert optimizer.stats()["sigma"] == pytest.approx(np.linalg.norm(sig))


@pytest.mark.parametrize("cls", [es.OpenAIES, es.SNES])
def test_any_slice_regenerates_the_same_offspring(cls):
    """A shard's slice (which may split an antithetic pair) equals the same rows of the
    whole batch, bit for bit; bounds clip."""
    extra = {"learning_rate": 0.01, "weight_decay": 0.0} if cls is es.OpenAIES else {}
    optimizer = cls(
        solution_dim=9, x0=np.zeros(9), bounds=(-0.5, 0.5), seed=3, popsize=10, sigma=0.4, **extra
    )
    batch = optimizer.ask()
    whole = cls.batch_format.solutions(batch, 0, 10)
    assert whole.max() <= 0.5 and whole.min() >= -0.5
    for start, stop in ((0, 3), (3, 7), (7, 10), (5, 6)):
        assert (
            cls.batch_format.solutions(batch, start, stop).tobytes() == whole[start:stop].tobytes()
        )


def test_noise_seeds_depend_on_seed_and_generation_only():
    first = es.noise_seeds(7, 3, 100)
    assert first[:10].tobytes() == es.noise_seeds(7, 3, 10).tobytes()
    assert not np.array_equal(first, es.noise_seeds(7, 4, 100))
    assert not np.array_equal(first, es.noise_seeds(8, 3, 100))


def test_es_checkpoint_holds_no_offspring(tmp_path):
    """What a shard reads of an ES batch is the centre, sigma and one seed per noise
    vector: the checkpoint's batch is M + P floats, not P x M."""
    import h5py

    from evocamp.config import run_spec, validate_config
    from evocamp.files.checkpoint import open_batch, write_state
    from evocamp.loop.engine import initialise, tell
    from evocamp.loop.evaluation import evaluate_shard

    config = validate_config(
        {
            "algorithms": {
                "oes": {"type": "openai_es", "popsize": 200, "archive": {"passive": False}}
            },
            "domains": {"big": {"type": "sphere", "solution_dim": 5000}},
        }
    )
    state = initialise(run_spec(config, algorithm="oes", domain="big", seed=0))
    path = tmp_path / "state.h5"
    write_state(path, state, run=resolve_run(state.spec))
    with h5py.File(path) as handle:
        stored = {name: handle["next_batch"][name].size for name in handle["next_batch"]}
        assert handle["next_batch"].attrs["size"] == 200
    assert stored == {"centre": 5000, "noise": 100, "sigma": 1}
    with open_batch(path, resolve=resolve_run) as (run, generation, batch, seeds, _):
        assert generation == 1 and isinstance(batch["centre"], h5py.Dataset)
        shard = evaluate_shard(run, batch=batch, seeds=seeds, generation=1, shard=1, shards=3)
    assert shard.start == 67 and shard.stop == 134
    whole = es.OpenAIESBatch.solutions(state.next_batch, 0, 200)
    objective = -np.sum((whole[67:134] - 0.4 * 5.12) ** 2, axis=1)
    assert np.argsort(shard.objective).tolist() == np.argsort(objective).tolist()
    # After a tell the state is the centre (once: the batch's and the optimizer's are the
    # same bytes) and Adam's two moments, 24 M bytes, plus seeds and headers.
    shards = [
        evaluate_shard(
            resolve_run(state.spec),
            batch=state.next_batch,
            seeds=state.next_seeds,
            generation=1,
            shard=0,
            shards=1,
        )
    ]
    state = tell(state, shards)
    write_state(path, state, run=resolve_run(state.spec))
    assert 24 * 5000 < path.stat().st_size <= 24 * 5000 + 16 * 200 + 64 * 1024
