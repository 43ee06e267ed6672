"""The tests' campaigns, as plain data (no evocamp imports: benchmarks/behaviour_digests.py
runs them with the code of other checkouts too)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "tests" / "plugins"

#: A small campaign: every family (two QD algorithms, OpenAI-ES, SNES and the plugin
#: optimizer example of docs/plugins.md) on a 6-d sphere, one seed, 6 generations.
SMALL_CAMPAIGN = {
    "campaign": "small",
    "master_seed": 7,
    "generations": 6,
    "shards": 3,
    "checkpoint_every": 3,
    "seeds": 1,
    "algorithms": {
        "me": {
            "type": "map_elites",
            "emitters": 2,
            "batch_size": 8,
            "sigma": 0.5,
            "archive": {"dims": [10, 10]},
        },
        "cmame": {
            "type": "cma_me",
            "emitters": 2,
            "batch_size": 8,
            "sigma": 0.5,
            "archive": {"dims": [10, 10]},
        },
        "oes": {
            "type": "openai_es",
            "popsize": 16,
            "sigma": 0.3,
            "learning_rate": 0.05,
            "archive": {"dims": [10, 10]},
        },
        "snes": {"type": "snes", "archive": {"dims": [10, 10]}},
        # The optimizer example of docs/plugins.md, as written (test_readme_optimizer_example_...).
        "mine": {
            "type": "plugin",
            "class": "my_optimizers:OnePlusLambda",
            "python_path": str(PLUGINS),
            "params": {"lam": 16, "sigma": 0.3},
            "archive": {"dims": [10, 10]},
        },
    },
    "domains": {"sphere": {"type": "sphere", "solution_dim": 6}},
}


#: Small BO campaign: both qUCB variants and random search on Ackley 4-d, 6 points per
#: generation on 3 shards, 6 generations (the surrogate takes over at generation 2).
BO_CAMPAIGN = {
    "campaign": "bo_small",
    "master_seed": 3,
    "generations": 6,
    "shards": 3,
    "checkpoint_every": 3,
    "seeds": 1,
    "algorithms": {
        "dec": {
            "type": "qucb_decentralised",
            "batch_size": 6,
            "initial_points": 6,
            "candidates": 300,
            "trees": 5,
            "refine_generations": 5,
        },
        "cen": {
            "type": "qucb_centralised",
            "batch_size": 6,
            "initial_points": 6,
            "candidates": 300,
            "trees": 5,
            "refine_generations": 5,
        },
        "rs": {"type": "random_search", "batch_size": 6},
    },
    "domains": {"ackley4": {"type": "ackley", "solution_dim": 4}},
}


#: The BO campaign in asynchronous mode, with the asynchronous plugin example of
#: docs/plugins.md: 4 slots on a LocalCluster of 2 Dask workers, virtual clock from the
#: domain's simulated evaluation times (exponential, mean 20 ms, really slept), 6
#: completions per generation (the plugin's: 4, its slots).
ASYNC_CAMPAIGN = {
    **BO_CAMPAIGN,
    "algorithms": {
        **BO_CAMPAIGN["algorithms"],
        "mine": {
            "type": "plugin",
            "class": "my_async:SteadyStateES",
            "python_path": str(PLUGINS),
            "params": {"sigma": 0.3},
        },
    },
    "campaign": "bo_async",
    "mode": "async",
    "dask": {"workers": 2},
    "async": {"slots": 4},
    "domains": {
        "ackley4": {
            "type": "ackley",
            "solution_dim": 4,
            "simulated_seconds": {"distribution": "exponential", "mean": 0.02},
        }
    },
}


#: Issue 24's QD types and CMA-ES on a 4-joint arm, one seed, 3 generations on 3 shards,
#: checkpoints every 2 (so a resumed run starts from a kept checkpoint). BOP-Elites is
#: kept small (its pattern search over the EJIE takes seconds per generation): a 4 x 4
#: archive, 8 initial Sobol points, then 8 proposals per generation. Every type makes at
#: least 8 solutions per generation, so 8 shards are allowed (test_qd_zoo); novelty
#: search's 16 give every one of them two.
QD_ZOO_CAMPAIGN = {
    "campaign": "qd_zoo",
    "master_seed": 11,
    "generations": 3,
    "shards": 3,
    "checkpoint_every": 2,
    "seeds": 1,
    "algorithms": {
        "ns": {"type": "novelty_search", "batch_size": 16},
        "nslc": {
            "type": "novelty_search",
            "batch_size": 8,
            "variation": "iso_line",
            "archive": {"local_competition": True},
        },
        "dns": {"type": "dominated_novelty_search", "batch_size": 8, "archive": {"capacity": 12}},
        "bop": {
            "type": "bop_elites",
            "batch_size": 8,
            "initial_points": 8,
            "search_restarts": 3,
            "archive": {"dims": [4, 4]},
        },
        "bandit": {"type": "cma_me_bandit", "emitters": 2, "batch_size": 4},
        "dds": {"type": "density_descent", "emitters": 2, "batch_size": 4},
        "cmaes": {"type": "cma_es"},
    },
    "domains": {"arm": {"type": "arm", "solution_dim": 4}},
}

#: A mixed search space (``domains.NAME.space``, docs/search-spaces.md): a log-scale
#: real, an integer, a categorical, a real active for one category, an ordinal; the
#: test plugin ``evocamp_test_plugin:typed_configurations`` asserts its types, and
#: ``tests/data/deephyper_space.json`` is the same space as DeepHyper writes it.
MIXED_SPACE = {
    "lr": {"type": "real", "low": 1.0e-5, "high": 0.1, "log": True, "default": 0.001},
    "layers": {"type": "integer", "low": 1, "high": 6, "default": 2},
    "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
    "momentum": {
        "type": "real",
        "low": 0.0,
        "high": 0.99,
        "default": 0.5,
        "condition": {"optimizer": ["sgd"]},
    },
    "width": {"type": "ordinal", "choices": [16, 32, 64]},
}
