"""The optimizer protocol: plugin classes, compact batches and the one message that
names class, method, run, generation (and shard) whenever a user's method fails."""

from __future__ import annotations

import ast
import os
import pickle
import re

import numpy as np
import pytest
import yaml
from conftest import PLUGINS, REPO, SMALL_CAMPAIGN, error_of, merged, shard_results

from evocamp.base.errors import (
    ConfigError,
    CorruptFileError,
    DiskFullError,
    EvaluationError,
    EvocampError,
    OptimizerError,
)
from evocamp.catalogue.factory import resolve_run
from evocamp.cli import main
from evocamp.config import run_spec, run_spec_json, validate_config
from evocamp.loop.engine import initialise, tell


def plugin_config(cls: str, *, module: str = "evocamp_test_optimizers", **params) -> dict:
    config = merged(SMALL_CAMPAIGN, {"shards": 2})
    config["algorithms"] = {
        "rs": {
            "type": "plugin",
            "class": f"{module}:{cls}",
            "python_path": str(PLUGINS),
            "params": params,
        }
    }
    return config


def optimizer_config(control_file) -> dict:
    return plugin_config("RandomSearch", batch=8, control_file=str(control_file))


#: A code example of docs/plugins.md that is a whole plugin module: its header names the
#: file and how a campaign uses it; the YAML block right after it, if any, is its entry.
DOCS_EXAMPLE = re.compile(
    r"```python\n(?P<code># (?P<module>\w+)\.py, used as +(?P<kind>class|function): "
    r'"\w+:(?P<name>\w+)".*?)```(?:\n\n```yaml\n(?P<entry>.*?)```)?',
    re.DOTALL,
)


def docs_examples() -> list[dict]:
    text = (REPO / "docs" / "plugins.md").read_text()
    return [match.groupdict() for match in DOCS_EXAMPLE.finditer(text)]


def test_the_docs_name_every_plugin_example_they_show():
    assert [example["module"] for example in docs_examples()] == [
        "my_domain",
        "my_optimizers",
        "my_es",
        "my_async",
    ]


@pytest.mark.parametrize("example", docs_examples(), ids=lambda example: example["module"])
def test_every_plugin_example_of_the_docs_runs_a_generation(tmp_path, example):
    """Each plugin module docs/plugins.md shows, written as it stands (under a module name
    of its own, so that tests/plugins' copies cannot stand in) and used as its YAML entry
    says, is imported by the configuration check and runs a generation through the real
    optimizer factory and the shard step, in this process."""
    module = f"docs_{example['module']}"
    (tmp_path / f"{module}.py").write_text(example["code"])
    where = {"python_path": str(tmp_path)}
    config = merged(SMALL_CAMPAIGN, {"shards": 2})
    if example["kind"] == "function":
        (name, entry), *_ = yaml.safe_load(example["entry"])["domains"].items()
        entry.update(where, function=f"{module}:{example['name']}")
        config["domains"] = {name: entry}
        algorithm, domain = "me", name
    else:
        entry = {"type": "plugin"}
        if example["entry"]:
            entry = next(iter(yaml.safe_load(example["entry"])["algorithms"].values()))
        entry.update(where, **{"class": f"{module}:{example['name']}"})
        config["algorithms"] = {"mine": entry}
        algorithm, domain = "mine", "sphere"
    state = initialise(
        run_spec(validate_config(config), algorithm=algorithm, domain=domain, seed=0)
    )
    state = tell(state, shard_results(state, 2))
    assert state.generation == 1
    assert np.isfinite(state.metrics_window[-1]["best_objective"])


def test_plugins_import_from_evocamp_only_its_public_face():
    """The docs' examples and the test plugins import only ``evocamp.plugins``, which
    exports what it names in ``__all__``."""
    import evocamp.plugins

    sources = [example["code"] for example in docs_examples()]
    sources += [path.read_text() for path in sorted(PLUGINS.glob("*.py"))]
    imported = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert {name for name in imported if name.startswith("evocamp")} == {"evocamp.plugins"}
    assert all(hasattr(evocamp.plugins, name) for name in evocamp.plugins.__all__)
    assert "CompactBatch" in evocamp.plugins.__all__


def test_docs_compact_batch_example_is_the_tested_plugin():
    text = (REPO / "docs" / "plugins.md").read_text().split("### Compact batches", 1)[1]
    assert text.split("```python\n", 1)[1].split("```", 1)[0] == (PLUGINS / "my_es.py").read_text()


def test_docs_asynchronous_example_is_the_tested_plugin():
    """docs/plugins.md's asynchronous example is tests/plugins/my_async.py, which the
    asynchronous campaign (tests/campaigns.py ASYNC_CAMPAIGN) runs end to end."""
    text = (REPO / "docs" / "plugins.md").read_text().split("### Asynchronous mode", 1)[1]
    assert (
        text.split("```python\n", 1)[1].split("```", 1)[0] == (PLUGINS / "my_async.py").read_text()
    )


def test_compact_batch_plugin_runs_and_its_shards_materialise_the_same_offspring():
    """docs/plugins.md's compact (1+lambda)-ES: shards materialise their slices from the
    stored batch (the same rows as the whole batch); the passive archive gets them."""
    config = validate_config(
        plugin_config("CompactOnePlusLambda", module="my_es", lam=6, sigma=0.3)
    )
    state = initialise(run_spec(config, algorithm="rs", domain="sphere", seed=0))
    assert set(state.next_batch) == {"parent", "sigma", "noise"} and len(state.next_seeds) == 6
    formats = resolve_run(state.spec).batch_format
    assert formats.name == "ParentAndNoise" and not formats.proposes_in_shards
    whole, _ = formats.materialise(state.next_batch, 0, 6)
    results = shard_results(state, 2)
    assert [(r.start, r.stop) for r in results] == [(0, 3), (3, 6)]
    for _ in range(4):
        state = tell(state, shard_results(state, 2))
    assert state.generation == 4 and state.archive.stats.num_elites > 0
    again = initialise(run_spec(config, algorithm="rs", domain="sphere", seed=0))
    np.testing.assert_array_equal(formats.materialise(again.next_batch, 0, 6)[0], whole)


def test_a_plugin_holding_its_asked_solutions_gives_them_to_the_shards_on_its_node(
    tmp_path, monkeypatch
):
    """docs/plugins.md: an optimizer with a compact batch that holds its solutions
    (``asked_solutions``) has them left in the node-local cache by the shard-mode tell;
    a shard on that node reads its rows there (the state file zeroed on disk, its
    identity kept), the rows its batch format makes."""
    from evocamp.catalogue.factory import resolve_run
    from evocamp.executors.steps import evaluate_step, tell_step
    from evocamp.files.checkpoint import write_state
    from evocamp.files.shard import read_shard
    from evocamp.loop.state_cache import read_full_state

    monkeypatch.setenv("EVOCAMP_STATE_CACHE", str(tmp_path / "cache"))
    config = validate_config(plugin_config("HoldingOnePlusLambda", lam=6, sigma=0.3))
    spec = run_spec(config, algorithm="rs", domain="sphere", seed=0)
    previous = tmp_path / "work" / "state_000000.h5"
    write_state(previous, initialise(spec), run=resolve_run(spec))
    for generation in (1, 2):
        files = [tmp_path / "work" / f"gen_{generation}" / f"shard_{s}.h5" for s in range(2)]
        for shard, path in enumerate(files):
            evaluate_step(state=previous, shard=shard, shards=2, output=path)
        output = tmp_path / "work" / f"state_{generation:06d}.h5"
        tell_step(state=previous, shard_files=[str(p) for p in files], output=output, total=20)
        previous = output
    expected = [r.objective.tobytes() for r in shard_results(read_full_state(previous), 2)]
    status = previous.stat()
    previous.write_bytes(bytes(status.st_size))
    os.utime(previous, ns=(status.st_atime_ns, status.st_mtime_ns))
    for shard in range(2):
        evaluate_step(state=previous, shard=shard, shards=2, output=tmp_path / f"s{shard}.h5")
        assert read_shard(tmp_path / f"s{shard}.h5").objective.tobytes() == expected[shard]


def test_a_failing_batch_format_is_named_with_the_shard():
    config = validate_config(plugin_config("FailingCompactES", lam=6))
    state = initialise(run_spec(config, algorithm="rs", domain="sphere", seed=0))
    with pytest.raises(OptimizerError) as caught:
        shard_results(state, 2)
    assert str(caught.value) == (
        "run rs/sphere/seed0, generation 1, shard 0: optimizer class "
        "evocamp_test_optimizers:FailingCompactES, method FailingParentAndNoise.solutions() "
        "raised ValueError: offspring 0..2 failed on purpose"
    )
    assert "Traceback" in caught.value.details and "ValueError" in caught.value.details


def test_old_style_compact_hooks_get_one_message_saying_what_to_change():
    message = error_of(plugin_config("OldStyleCompact"))
    assert (
        "key 'algorithms.rs.class': optimizer class evocamp_test_optimizers:OldStyleCompact "
        "describes compact batches with batch_size, solutions on the optimizer class itself "
        "(evocamp 0.1); move them to a subclass of evocamp.plugins.CompactBatch"
    ) in message
    assert "batch_format = MyBatch" in message


def test_plugin_optimizer_batch_of_the_wrong_shape_is_named(tmp_path):
    control = tmp_path / "control"
    config = validate_config(optimizer_config(control))
    state = initialise(run_spec(config, algorithm="rs", domain="sphere", seed=0))
    control.write_text("ask 2")
    with pytest.raises(OptimizerError) as caught:
        tell(state, shard_results(state, 1))
    assert str(caught.value) == (
        "run rs/sphere/seed0, generation 2: optimizer "
        "evocamp_test_optimizers:RandomSearch, method ask() returned a batch of shape "
        "(8, 5); expected (n, 6) with n >= 1 (solution_dim 6)"
    )


def test_incomplete_plugin_optimizer_is_named_before_it_runs(tmp_path, capsys):
    """Refused by the configuration check (before any job), and by the init step for a
    run spec given by hand."""
    config = optimizer_config(tmp_path / "control")
    config["algorithms"]["rs"]["class"] = "evocamp_test_optimizers:NoTell"
    config["algorithms"]["rs"]["params"] = {}
    assert (
        "key 'algorithms.rs.class': optimizer class evocamp_test_optimizers:NoTell has no "
        "method 'tell'; an optimizer needs ask() and tell(objective, measures, **extra)"
    ) in error_of(config)
    resolved = validate_config(config, check_plugins=False)
    spec = run_spec(resolved, algorithm="rs", domain="sphere", seed=0)
    output = tmp_path / "state.h5"
    assert main(["init", "--spec", run_spec_json(spec), "--output", str(output)]) == 1
    assert not output.exists()
    assert capsys.readouterr().err == (
        "evocamp: error: run rs/sphere/seed0: optimizer class evocamp_test_optimizers:NoTell "
        "has no method 'tell'; an optimizer needs ask() and tell(objective, measures, "
        "**extra)\n"
    )
    config["algorithms"]["rs"]["class"] = "evocamp_test_optimizers:Missing"
    assert (
        "key 'algorithms.rs.class': optimizer class evocamp_test_optimizers:Missing cannot be "
        "imported: module 'evocamp_test_optimizers' has no attribute 'Missing' (python_path: "
        f"{PLUGINS})"
    ) in error_of(config)


@pytest.mark.parametrize(
    "cls", [ConfigError, EvaluationError, OptimizerError, CorruptFileError, DiskFullError]
)
def test_every_error_survives_pickling_with_its_details(cls):
    """What a Dask worker raises arrives whole in the segment job."""
    error = cls("run a/b/seed0, generation 3: it broke", details="Traceback ...\n")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls and isinstance(again, EvocampError)
    assert str(again) == str(error) and again.details == "Traceback ...\n"
