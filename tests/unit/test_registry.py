"""The catalogue is the one place that knows algorithm types and built-in domains: the
schema, the run specs and the documentation agree with it."""

from __future__ import annotations

import ast
import copy
import json
import re

import pytest
import yaml
from conftest import REPO, SMALL_CAMPAIGN

from evocamp.base.errors import ConfigError
from evocamp.catalogue.algorithms import ALGORITHMS, FAMILIES
from evocamp.catalogue.domains import DOMAINS
from evocamp.config import experiments_of, load_schema, run_spec, seeds_of, validate_config
from evocamp.model.runspec import COMMAND, PLUGIN
from evocamp.reporting.reference import render

#: The keys of an algorithm entry that every type has.
COMMON_KEYS = {"type", "archive"}


def test_plugin_is_spelt_once_in_the_code():
    """``PLUGIN`` is the one spelling of the word as a value: no module writes it out."""
    spelt = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "src" / "evocamp").rglob("*.py"))
        if re.search(r"""["']plugin["']""", path.read_text())
    ]
    assert spelt == ["src/evocamp/model/runspec.py"]


def test_schema_types_are_the_catalogue_entries():
    definitions = load_schema()["$defs"]
    assert definitions["algorithm"]["properties"]["type"]["enum"] == list(ALGORITHMS)
    assert definitions["domain"]["properties"]["type"]["enum"] == [*DOMAINS, PLUGIN, COMMAND]


def test_schema_keys_are_the_keys_some_type_accepts():
    """A key no type accepted before needs its shape in the schema file (a type made of
    existing keys needs nothing there: the type lists come from the catalogue)."""
    properties = set(load_schema()["$defs"]["algorithm"]["properties"])
    accepted = {key for entry in ALGORITHMS.values() for key in entry.keys}
    assert properties - COMMON_KEYS == accepted, (
        "edit $defs.algorithm.properties of src/evocamp/schemas/config.schema.yaml: "
        f"keys no type accepts {sorted(properties - COMMON_KEYS - accepted)}, "
        f"keys without a shape {sorted(accepted - properties)}"
    )


def test_key_shapes_of_the_catalogue_are_keys_the_schema_file_lacks():
    """A library family's own keys get their shapes from its entries
    (``AlgorithmType.key_shapes``); a key of the schema file is never shaped twice, and
    the entries that shape one key agree."""
    text = (REPO / "src" / "evocamp" / "schemas" / "config.schema.yaml").read_text()
    in_file = set(yaml.safe_load(text)["$defs"]["algorithm"]["properties"])
    shapes = {}
    for entry in ALGORITHMS.values():
        assert not set(entry.key_shapes) & in_file, entry.name
        for key, shape in entry.key_shapes.items():
            assert shapes.setdefault(key, shape) == shape, key
            assert key in entry.keys, (entry.name, key)
    assert load_schema()["$defs"]["algorithm"]["properties"]["incpopsize"]["minimum"] == 2
    with pytest.raises(ConfigError, match="incpopsize"):
        validate_config(
            {
                "algorithms": {"a": {"type": "ipop_cma_es", "incpopsize": 1}},
                "domains": {"d": {"type": "sphere"}},
            }
        )


def test_schema_states_no_default_of_a_type():
    """Defaults of types live in the catalogue only (the docs' tables are generated)."""
    algorithm = load_schema()["$defs"]["algorithm"]["properties"]
    stated = {key for key, value in algorithm.items() if "default" in value}
    assert stated == {"archive"}
    for key, value in algorithm.items():
        if key not in COMMON_KEYS:
            assert not re.search(r"\bdefault\b\s*[-\d(]", value.get("description", "")), key


def every_type_campaigns() -> dict[str, dict]:
    """The campaigns whose run specs tests/data/run_specs.json holds (written by the
    flat package before the registry (now the catalogue) existed)."""
    campaigns = {
        name: yaml.safe_load((REPO / "config" / f"{name}.yaml").read_text())
        for name in ("config", "lunar_lander", "digits", "bo")
    }
    for algorithm in campaigns["bo"]["algorithms"].values():
        # config/bo.yaml has set the cheaper proposals since 2026-11-27; the recorded
        # specs are those of the catalogue's defaults, which this test guards.
        for key in ("refit_every", "candidates", "refine_generations"):
            algorithm.pop(key, None)
    small = copy.deepcopy(SMALL_CAMPAIGN)
    small["algorithms"]["mine"]["python_path"] = "tests/plugins"
    campaigns["small"] = small
    measured = ["map_elites", "map_elites_line", "cvt_map_elites", "cma_me", "cma_mae"]
    campaigns["every_type"] = {
        "campaign": "every_type",
        "shards": 2,
        "algorithms": {t: {"type": t} for t in [*measured, "openai_es", "snes"]},
        "domains": {t: {"type": t} for t in ["sphere", "rastrigin", "arm", "lunar_lander"]},
    }
    unmeasured = ["openai_es", "snes", "qucb_centralised", "qucb_decentralised", "random_search"]
    campaigns["every_type_nomeasures"] = {
        "campaign": "every_type_nm",
        "shards": 2,
        "algorithms": {t: {"type": t} for t in unmeasured},
        "domains": {t: {"type": t} for t in ["ackley", "plain_sphere", "plain_rastrigin"]},
    }
    # Issue 24's types (recorded when they were added), a domain with CQD settings, and
    # CMA-ES on a domain without measures.
    added = [
        "novelty_search",
        "dominated_novelty_search",
        "bop_elites",
        "cma_me_bandit",
        "density_descent",
        "cma_es",
    ]
    campaigns["issue24_types"] = {
        "campaign": "issue24",
        "shards": 2,
        "algorithms": {t: {"type": t} for t in added},
        "domains": {
            "arm": {"type": "arm"},
            "arm_cqd": {"type": "arm", "cqd": {"target_points": 100, "penalties": [0, 0.5, 1]}},
        },
    }
    campaigns["issue24_cma_es"] = {
        "campaign": "issue24_nm",
        "shards": 2,
        "algorithms": {"cma_es": {"type": "cma_es"}},
        "domains": {"ackley": {"type": "ackley"}},
    }
    campaigns["digits_es"] = {
        "campaign": "d",
        "shards": 2,
        "algorithms": {t: {"type": t} for t in ["openai_es", "snes"]},
        "domains": {"digits": {"type": "digits", "params": {"hidden": 8}}},
    }
    return campaigns


def test_run_specs_are_those_of_the_flat_package():
    """Every type's defaults as the catalogue fills them give the run specs evocamp 0.1
    gave (a changed spec would recompute finished runs: kept checkpoints are matched by
    their spec)."""
    expected = json.loads((REPO / "tests" / "data" / "run_specs.json").read_text())
    found = {}
    for name, raw in every_type_campaigns().items():
        config = validate_config(raw, check_plugins=False)
        for algorithm, domain in experiments_of(config):
            for seed in seeds_of(config):
                key = f"{name}:{algorithm}/{domain}/seed{seed}"
                found[key] = run_spec(config, algorithm=algorithm, domain=domain, seed=seed)
    assert sorted(found) == sorted(expected)
    for key in expected:
        assert found[key] == expected[key], key


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_type_has_a_summary_and_its_defaults_validate(name):
    entry = ALGORITHMS[name]
    assert entry.summary and FAMILIES[entry.family.name] is entry.family
    if entry.cls is None:
        return
    if entry.needs_measures:
        domain = "arm" if entry.needs_bounds else "sphere"
    else:
        domain = "ackley" if entry.needs_bounds else "sphere"
    config = validate_config(
        {"algorithms": {"a": {"type": name}}, "domains": {"d": {"type": domain}}, "shards": 1}
    )
    spec = run_spec(config, algorithm="a", domain="d", seed=0)
    assert set(entry.as_stored(entry.defaults)) <= set(spec["algorithm_spec"])
    assert entry.generation_size(spec["algorithm_spec"]) >= 1


def test_configuration_reference_is_generated_from_the_catalogue():
    """docs/configuration.md's tables of types and domains are what the catalogue gives
    (regenerate: python -m evocamp.reporting.reference docs/configuration.md)."""
    text = (REPO / "docs" / "configuration.md").read_text()
    assert "<!-- BEGIN generated: algorithms -->" in text
    assert "<!-- BEGIN generated: domains -->" in text
    assert render(text) == text
    for name in ALGORITHMS:
        assert f"| `{name}` |" in text
    for name in DOMAINS:
        assert f"| `{name}` |" in text


def test_a_family_is_declared_once_beside_its_types_and_documented():
    """The four-file shape of a family (docs/architecture.md, "Adding a family from
    another library"): ``Family`` and ``Extra`` are constructed in the catalogue's
    entry modules only, ``FAMILIES`` is exactly the families of the entries, and every
    type (but ``plugin``, docs/plugins.md) has its place in docs/families.md."""
    constructed = {}
    for path in sorted((REPO / "src" / "evocamp").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
                "Family",
                "Extra",
            ):
                constructed.setdefault(node.func.id, set()).add(path.name)
    assert constructed == {
        "Family": {"algorithms.py", "libraries.py"},
        "Extra": {"algorithms.py", "domains.py", "libraries.py"},
    }
    assert list(FAMILIES.values()) == list(dict.fromkeys(e.family for e in ALGORITHMS.values()))
    families_page = (REPO / "docs" / "families.md").read_text()
    for name in ALGORITHMS:
        assert name == PLUGIN or f"`{name}`" in families_page, name
