"""Write evocamp 0.1 (flat package) checkpoints and the archives their continuation gives."""

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, "/work/base/tests")
from conftest import shard_results
from evocamp.engine import initialise, tell
from evocamp.storage import read_state, write_final_archive, write_state

from evocamp.config import run_spec, validate_config

out = Path(sys.argv[1])
plugins = "/work/refactor/tests/plugins"
config = validate_config(
    {
        "campaign": "legacy",
        "master_seed": 5,
        "shards": 2,
        "checkpoint_every": 2,
        "algorithms": {
            "me": {"type": "map_elites", "batch_size": 8, "archive": {"dims": [8, 8]}},
            "cmamae": {
                "type": "cma_mae",
                "emitters": 2,
                "batch_size": 4,
                "archive": {"dims": [8, 8]},
            },
            "oes": {"type": "openai_es", "popsize": 8, "sigma": 0.3, "archive": {"dims": [8, 8]}},
            "snes": {"type": "snes", "archive": {"dims": [8, 8]}},
            "mine": {
                "type": "plugin",
                "class": "my_optimizers:OnePlusLambda",
                "python_path": plugins,
                "params": {"lam": 8, "sigma": 0.3},
                "archive": {"dims": [8, 8]},
            },
        },
        "domains": {"sphere": {"type": "sphere", "solution_dim": 6}},
    }
)
bo = validate_config(
    {
        "campaign": "legacy",
        "master_seed": 5,
        "shards": 2,
        "checkpoint_every": 2,
        "algorithms": {
            "dec": {
                "type": "qucb_decentralised",
                "batch_size": 4,
                "initial_points": 4,
                "candidates": 50,
                "trees": 3,
                "refine_generations": 2,
            },
            "cen": {
                "type": "qucb_centralised",
                "batch_size": 4,
                "initial_points": 4,
                "candidates": 50,
                "trees": 3,
                "refine_generations": 2,
            },
            "rs": {"type": "random_search", "batch_size": 4},
        },
        "domains": {"ackley": {"type": "ackley", "solution_dim": 3}},
    }
)
expected = {}
for cfg, domain in ((config, "sphere"), (bo, "ackley")):
    for name in cfg["algorithms"]:
        spec = run_spec(cfg, algorithm=name, domain=domain, seed=0)
        state = initialise(spec)
        for _ in range(2):
            state = tell(state, shard_results(state, 2))
        path = out / f"{name}.h5"
        write_state(path, state)
        state = read_state(path)
        for _ in range(2):
            state = tell(state, shard_results(state, 2))
        final = out / f"{name}_final.tmp.h5"
        write_final_archive(
            final,
            spec=spec,
            archive=state.archive,
            optimizer=state.optimizer,
            best=state.best,
            generation=state.generation,
            evaluations=0,
        )
        expected[name] = hashlib.sha256(final.read_bytes()).hexdigest()
        final.unlink()
(out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
print(expected)
