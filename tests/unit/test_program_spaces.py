"""Programs over a search space (``type: command`` with ``space:``, docs/programs.md): the
parameters file names each active parameter with its typed value in the blocks of
Dakota's kinds of variables, byte for byte as Dakota 6.24 writes such a study
(tests/data/dakota/params_space.in); read back by ``dakota.interfacing`` when it is
installed (else by the test driver's reader, which types values by its rule) as ints,
floats and strings, inactive parameters absent; JSON keeps the types; ``{name}`` in
the command is the parameter's value; what cannot work is refused on one line."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import MIXED_SPACE, REPO, docs_block, error_of, with_local_keys

from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.loop.evaluation import evaluate_slice
from evocamp.model.space import Space, space_entries
from evocamp.tasks.program_files import Evaluation, dakota_parameters, parameters_text
from evocamp.tasks.programs import Program, campaign_folder

DRIVER = REPO / "tests" / "programs" / "space_driver.py"
REFERENCE = REPO / "tests" / "data" / "dakota" / "params_space.in"


def driver_module():
    spec = importlib.util.spec_from_file_location("space_driver", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_back(path) -> dict:
    """A Dakota parameters file's variables as ``dakota.interfacing`` reads them (the
    driver's own reader, the same typing rule, where it is not installed)."""
    if importlib.util.find_spec("dakota") and importlib.util.find_spec("dakota.interfacing"):
        import dakota.interfacing as di

        parameters, _ = di.read_parameters_file(str(path), results_file=di.UNNAMED)
        return dict(parameters.items())
    return driver_module().read_dakota(path)


def test_the_parameters_file_is_what_dakota_writes_for_the_same_variables(tmp_path):
    """Declared in any order, the parameters are written in Dakota's blocks (continuous,
    discrete integer range, integer set, string set, real set), each in its format."""
    space = {
        "act": {"type": "categorical", "choices": ["a_rather_long_activation_name", "tanh"]},
        "lr": {"type": "real", "low": 1e-5, "high": 0.1, "log": True},
        "drop": {"type": "categorical", "choices": [0.25, 0.5]},
        "depth": {"type": "integer", "low": 1, "high": 6},
        "batch": {"type": "ordinal", "choices": [16, 32, 64]},
        "wd": {"type": "real", "low": 1e-6, "high": 1e-3, "log": True},
    }
    domain = {"command": "run", "space": space_entries(space), "solution_dim": 6}
    program = Program(domain)
    point = {"act": "a_rather_long_activation_name", "lr": 0.001, "drop": 0.25, "depth": 4}
    solution = Space(domain["space"]).solution({**point, "batch": 32, "wd": 3.5e-5})
    (values,) = Space(domain["space"]).configurations(solution)
    evaluation = Evaluation(values=values, eval_id=1, seed=0, generation=0, solution=0)
    text = dakota_parameters(evaluation, kinds=program.kinds, responses=["objective"])
    assert text == REFERENCE.read_text()
    (tmp_path / "params.in").write_text(text)
    assert read_back(tmp_path / "params.in") == values
    assert [type(v) for v in read_back(tmp_path / "params.in").values()] == [
        float, float, int, int, str, float,
    ]  # fmt: skip


CONFIGURATIONS = [
    {"lr": 0.001, "layers": 3, "optimizer": "adam", "width": 64},
    {"lr": 3.25e-5, "layers": 1, "optimizer": "sgd", "momentum": 0.9, "width": 16},
    {"lr": 0.0123456789, "layers": 6, "optimizer": "sgd", "momentum": 0.0, "width": 32},
]


def space_spec(tmp_path, **domain) -> dict:
    config = validate_config(
        {
            "algorithms": {"rs": {"type": "random_search", "batch_size": 4}},
            "domains": {
                "d": {
                    "type": "command",
                    "command": [sys.executable, str(DRIVER), "{params}", "{results}"],
                    "measure_ranges": [],
                    "space": MIXED_SPACE,
                    "keep_work": "all",
                    "work_root": str(tmp_path / "scratch"),
                    **domain,
                }
            },
        }
    )
    return with_local_keys(run_spec(config, algorithm="rs", domain="d", seed=0), config)


@pytest.mark.parametrize("params_format", ["dakota", "json"])
def test_a_program_reads_each_configuration_typed_and_its_placeholders(tmp_path, params_format):
    command = [sys.executable, str(DRIVER), "{params}", "{results}", "--lr={lr}", "{optimizer}"]
    spec = space_spec(tmp_path, command=command, params_format=params_format)
    space = Space(spec["domain_spec"]["space"])
    solutions = np.array([space.solution(c) for c in CONFIGURATIONS])
    seeds = np.array([11, 22, 33], dtype=np.uint64)
    result = evaluate_slice(
        resolve_run(spec), generation=2, shard=0, start=0, solutions=solutions, seeds=seeds
    )
    assert result.status is None  # the driver checked every type (else exit status 3)
    driver = driver_module()
    run = tmp_path / "scratch" / "evocamp-work" / campaign_folder(Path.cwd()) / "default/rs/d"
    for k, configuration in enumerate(CONFIGURATIONS):
        folder = run / "seed0" / "g2" / f"s{k}"
        seen = json.loads((folder / "seen.json").read_text())
        if params_format == "dakota":
            values = read_back(folder / "params.in")
            assert seen["values"] == values  # the driver read what dakota.interfacing reads
            assert (folder / "params.in").read_text().startswith(f"{len(configuration):>43d} ")
        else:
            values = json.loads((folder / "params.in").read_text())["variables"]
        assert values == pytest.approx(configuration, rel=1e-15)
        # momentum only for sgd; Dakota's order: continuous, integer range, set, string
        order = ("lr", "momentum", "layers", "width", "optimizer")
        if params_format == "json":
            order = tuple(MIXED_SPACE)
        assert list(values) == [name for name in order if name in configuration]
        assert {name: type(v) for name, v in values.items()} == {
            name: driver.TYPES[name] for name in configuration
        }
        assert seen["words"] == [f"--lr={configuration['lr']!r}", configuration["optimizer"]]
        written = values["lr"]  # Dakota's 16 digits, JSON's 17
        expected = (
            -((np.log10(written) + 3) ** 2)
            - 0.1 * (configuration["layers"] - 3) ** 2
            + configuration.get("momentum", 0.3)
            + configuration["width"] / 64
            + int(seeds[k]) % 1000 * 1e-6
        )
        assert result.objective[k] == pytest.approx(expected, rel=1e-12)


def test_a_batch_holds_one_configuration_per_evaluation():
    """Dakota's format: the blocks one after the other, each with its own active
    parameters (read back one by one); JSON: one typed object per evaluation."""
    program = Program({"command": "run", "space": space_entries(MIXED_SPACE), "solution_dim": 5})
    evaluations = [
        Evaluation(values=c, eval_id=k + 1, seed=k, generation=0, solution=k)
        for k, c in enumerate(CONFIGURATIONS[:2])
    ]
    common = {"kinds": program.kinds, "responses": ["objective"], "run": "r", "batch": True}
    text = parameters_text(evaluations, params_format="dakota", **common)
    blocks = text.split(" metadata\n")[:-1]
    assert [block.split()[0] for block in blocks] == ["4", "5"]
    for block, configuration in zip(blocks, CONFIGURATIONS, strict=False):
        lines = block.splitlines()
        variables = lines[1 : 1 + int(lines[0].split()[0])]
        assert {line.split()[1] for line in variables} == set(configuration)
    document = json.loads(parameters_text(evaluations, params_format="json", **common))
    assert [e["variables"] for e in document["evaluations"]] == CONFIGURATIONS[:2]


BASE = {
    "type": "command",
    "command": [sys.executable, "train.py"],
    "measure_ranges": [],
    "space": MIXED_SPACE,
}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            {"variables": ["a", "b"]},
            "key 'domains.d.variables': the space names the parameters; leave variables out",
        ),
        (
            {"command": "python train.py --momentum {momentum}"},
            "key 'domains.d.command': {momentum} names a conditional parameter, absent when "
            "inactive: read it from the parameters file",
        ),
        (
            {"command": "python train.py --lr {lr}", "batch": True},
            "key 'domains.d.command': {lr} names one evaluation, and a batch holds several",
        ),
        (
            {"command": "python train.py --lr {rate}"},
            "key 'domains.d.command': unknown placeholder {rate} (placeholders: {params}, "
            "{results}, {workdir}, {seed}, {ranks}, {eval_id}, {lr}, {layers}, {optimizer}, "
            "{momentum}, {width})",
        ),
        (
            {"space": {**MIXED_SPACE, "workdir": {"type": "categorical", "choices": ["a"]}}},
            "key 'domains.d.space': parameter 'workdir' is named as the placeholder "
            "{workdir}; rename it",
        ),
        (
            {"space": {"learning rate": {"type": "real", "low": 0.0, "high": 1.0}}},
            "key 'domains.d.space': parameter 'learning rate': Dakota's parameters file "
            "needs a name without spaces (params_format: json takes any)",
        ),
        (
            {"space": {"act": {"type": "categorical", "choices": ["relu", " tanh"]}}},
            "key 'domains.d.space': parameter 'act': choice ' tanh' cannot be written in "
            "Dakota's parameters file",
        ),
        (
            {"solution_dim": 5},
            "key 'domains.d.solution_dim': a domain with a space has one parameter per entry",
        ),
    ],
)
def test_what_a_program_over_a_space_cannot_do_is_named_on_one_line(change, problem):
    config = {
        "algorithms": {"rs": {"type": "random_search"}},
        "domains": {"d": {**BASE, **change}},
    }
    lines = error_of(config).splitlines()
    assert any(line.strip().startswith(problem) for line in lines), lines


def test_a_configspace_file_names_the_parameters_the_command_may_use(monkeypatch):
    """The space of a DeepHyper HpProblem's JSON file (tests/data/deephyper_space.json)
    gives the placeholders; its conditional momentum is refused in the command."""
    monkeypatch.chdir(REPO)
    domain = {**BASE, "space": "tests/data/deephyper_space.json"}
    config = {"algorithms": {"rs": {"type": "random_search"}}, "domains": {"d": domain}}
    domain["command"] = "python train.py --lr={lr} --optimizer={optimizer}"
    validate_config(config)
    domain["command"] = "python train.py --momentum={momentum}"
    assert "key 'domains.d.command': {momentum} names a conditional parameter" in error_of(config)


def test_json_takes_what_dakotas_format_cannot_hold():
    space = {"learning rate": {"type": "categorical", "choices": [" a", "b"]}}
    domain = {**BASE, "space": space, "params_format": "json"}
    validate_config({"algorithms": {"rs": {"type": "random_search"}}, "domains": {"d": domain}})


def test_the_docs_parameters_file_is_what_a_program_over_the_space_gets():
    values = {"lr": 0.001, "layers": 3, "optimizer": "sgd", "momentum": 0.9, "width": 32}
    program = Program({"command": "run", "space": space_entries(MIXED_SPACE), "solution_dim": 5})
    evaluation = Evaluation(values=values, eval_id=5_000_012, seed=0, generation=5, solution=11)
    text = dakota_parameters(evaluation, kinds=program.kinds, responses=["objective"])
    assert text == docs_block("programs.md", " " * 42 + "5 variables")


def test_the_tuning_recipe_passes_the_configuration_check(tmp_path):
    """docs/tuning.md's training script and campaign file, as written, through the real
    ``evocamp check-config`` (the program found, the space, the placeholders)."""
    (tmp_path / "train.py").write_text(docs_block("tuning.md", "# train.py, run as"))
    (tmp_path / "tune_script.yaml").write_text(docs_block("tuning.md", "# tune_script.yaml"))
    completed = subprocess.run(
        [sys.executable, "-m", "evocamp", "check-config", "tune_script.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        },
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == [
        f"{algorithm}/digits/seed{seed}" for algorithm in ("bo", "rs") for seed in range(3)
    ]
