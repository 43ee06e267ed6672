"""Evaluations that are programs (``type: command``, docs/programs.md): Dakota's files
byte for byte, a real driver run by the shard step in its work directory, every kind of
failure named with its work directory and line, batches, work directories bounded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, with_local_keys

from evocamp.base.errors import ConfigError, EvaluationError
from evocamp.catalogue.factory import resolve_run
from evocamp.config import run_spec, validate_config
from evocamp.files.shard import STATUS
from evocamp.loop.evaluation import evaluate_slice
from evocamp.loop.step_settings import StepSettings
from evocamp.tasks.program_files import Evaluation, dakota_parameters, read_results
from evocamp.tasks.program_keys import LOCAL_KEYS
from evocamp.tasks.programs import campaign_folder

DRIVER = REPO / "tests" / "programs" / "sphere_driver.py"

#: What Dakota 6.24 wrote for the first point of a list_parameter_study over two
#: continuous_design variables (/work/shared/notes/dakota.md, verified by running it).
DAKOTA_WROTE = """\
                                          2 variables
                      5.000000000000000e-01 x1
                      1.000000000000000e+00 x2
                                          1 functions
                                          1 ASV_1:obj_fn_1
                                          2 derivative_variables
                                          1 DVV_1:x1
                                          2 DVV_2:x2
                                          0 analysis_components
                                          1 eval_id
                                          0 metadata
"""


def test_the_parameters_file_is_dakotas_byte_for_byte():
    values = {"x1": 0.5, "x2": 1.0}
    evaluation = Evaluation(values=values, eval_id=1, seed=9, generation=1, solution=0)
    kinds = dict.fromkeys(values, "continuous")
    assert dakota_parameters(evaluation, kinds=kinds, responses=["objective"]) == DAKOTA_WROTE
    values = {"a": -0.25, "b": 3e-7}
    negative = Evaluation(values=values, eval_id=12, seed=0, generation=1, solution=0)
    kinds = dict.fromkeys(values, "continuous")
    lines = dakota_parameters(negative, kinds=kinds, responses=["objective"]).splitlines()
    assert lines[1] == " " * 21 + "-2.500000000000000e-01 a"
    assert len(lines[2].split(" b")[0]) == 43


RESPONSES = ["objective", "measure_1", "extra"]


def results(text: str, *, fmt: str = "dakota", count: int = 1, batch: bool = False):
    return read_results(
        text, results_format=fmt, responses=RESPONSES, measure_dim=1, count=count, batch=batch
    )


def test_results_files_are_read_or_their_offending_line_named():
    assert results("1.5 f\n-2 measure_1\n3e2\n") == [(1.5, -2.0, 300.0)]
    assert results("\nfail\n") == ["line 2 says fail"]
    assert results("fail: mesh did not converge") == ["line 1 says fail: mesh did not converge"]
    assert results("fail", fmt="json") == ["the file says fail"]
    assert results("1.5\nabc x\n3\n") == ["line 2 'abc x': 'abc' is not a number"]
    assert results("1.5\n2\n") == [
        "2 values, expected 3 (objective, measure_1, extra) after line 2"
    ]
    assert results("1\n2\n3\n4\n") == [
        "line 4 '4': more values than the 3 expected (objective, measure_1, extra)"
    ]
    assert results("1 objective\n2 extra\n3 measure_1\n") == [
        "line 2 '2 extra': labelled extra, but value 2 is measure_1 "
        "(order: objective, measure_1, extra)"
    ]
    assert results("1\nnan\n3\n") == ["line 2 'nan': nan is not finite"]
    batch = results("1\n2\n3\n#\nfail\n#\n4\n5\n6\n", count=3, batch=True)
    assert batch == [(1.0, 2.0, 3.0), "line 5 says fail", (4.0, 5.0, 6.0)]
    assert results("1\n2\n3\n", count=2, batch=True) == (
        "it holds 1 evaluations separated by '#' lines, expected 2"
    )
    good = '{"objective": 1, "measures": [2], "extra": 3}'
    assert results(good, fmt="json") == [(1.0, 2.0, 3.0)]
    assert results('{"objective": "x", "measures": [2], "extra": 3}', fmt="json") == [
        "the file: 'objective' is \"x\", not a number"
    ]
    assert results(f'[{good}, null, "fail"]', fmt="json", count=3, batch=True) == [
        (1.0, 2.0, 3.0),
        "evaluation 1 of the file says fail",
        "evaluation 2 of the file says fail",
    ]
    assert (
        results("{oops", fmt="json")
        == "line 1: not JSON (Expecting property name enclosed in double quotes)"
    )


def command_config(tmp_path, *, evaluation=None, **domain) -> dict:
    """A validated campaign of MAP-Elites on a command domain ``d`` of the test driver."""
    return validate_config(
        {
            "algorithms": {"me": {"type": "map_elites", "emitters": 1, "emitter_batch_size": 8}},
            "domains": {
                "d": {
                    "type": "command",
                    "command": [sys.executable, str(DRIVER)],
                    "solution_dim": 4,
                    "measure_ranges": [[-4, 4], [-4, 4]],
                    "sense": "minimise",
                    "work_root": str(tmp_path / "scratch"),
                    **domain,
                }
            },
            "evaluation": evaluation or {},
        }
    )


def command_spec(tmp_path, *, evaluation=None, **domain) -> dict:
    config = command_config(tmp_path, evaluation=evaluation, **domain)
    return with_local_keys(run_spec(config, algorithm="me", domain="d", seed=0), config)


SOLUTIONS = np.linspace(-1, 1, 16).reshape(4, 4)


def evaluate(spec, seeds, *, start=4, shard=1, generation=3):
    return evaluate_slice(
        resolve_run(spec),
        generation=generation,
        shard=shard,
        start=start,
        solutions=SOLUTIONS[: len(seeds)],
        seeds=np.asarray(seeds, dtype=np.uint64),
    )


def expected_objective(row: np.ndarray, seed: int, *, written: str = "dakota") -> float:
    """What the driver computes: from the values as the parameters file holds them
    (Dakota's 16 significant digits; JSON's every digit)."""
    values = [float(f"{v:.15e}") if written == "dakota" else float(v) for v in row]
    return -(sum((v - 0.2) ** 2 for v in values) + (seed % 1000) * 1e-6)


def work(tmp_path):
    return tmp_path / "scratch" / "evocamp-work" / campaign_folder(Path.cwd())


@pytest.mark.parametrize("formats", [("dakota", "dakota"), ("json", "json")])
def test_a_program_evaluates_each_solution_with_its_seed_and_leaves_nothing(
    tmp_path, monkeypatch, formats
):
    params_format, results_format = formats
    command = [sys.executable, str(DRIVER)]
    if results_format == "json":
        command += ["--results", "json", "{params}", "{results}"]
    spec = command_spec(
        tmp_path, command=command, params_format=params_format, results_format=results_format
    )
    seeds = [1234, 98765, 5, 4242]
    result = evaluate(spec, seeds)
    assert result.status is None
    for k, seed in enumerate(seeds):
        assert result.objective[k] == expected_objective(SOLUTIONS[k], seed, written=params_format)
        values = [float(f"{v:.15e}") if params_format == "dakota" else v for v in SOLUTIONS[k]]
        assert list(result.measures[k]) == [sum(values[:2]), sum(values[2:])]
    run = work(tmp_path) / "default/me/d/seed0"
    assert [path.name for path in run.rglob("*")] == ["g3"]  # every work directory removed
    evaluate(spec, seeds[:1], generation=4)
    assert [path.name for path in run.rglob("*")] == ["g4"]  # and g3 when g4 starts


def test_every_failure_is_named_with_its_work_directory_and_line(tmp_path, monkeypatch):
    """A ``fail`` results file and a non-zero exit status, under discard: the others
    are evaluated, each failed one is named (solution, work directory, line, output),
    and its work directory is kept."""
    monkeypatch.setenv("FAIL_EVERY", "7")
    monkeypatch.setenv("CRASH_EVERY", "11")
    spec = command_spec(tmp_path, evaluation={"on_failure": "discard"})
    result = evaluate(spec, [7, 11, 5, 6])
    assert list(result.status) == [STATUS["failed"], STATUS["crashed"], 0, 0]
    kept = work(tmp_path) / "default/me/d/seed0/g3"
    assert result.messages[4] == (
        "run me/d/seed0, generation 3, shard 1, solution 4: results file results.out: "
        f"line 1 says fail; work directory {kept / 's4'} (kept, program.log holds the output)"
    )
    assert result.messages[5].startswith(
        "run me/d/seed0, generation 3, shard 1, solution 5: the program exited with status 3 "
        f"(command: {sys.executable} {DRIVER} params.in results.out); program output ends: "
        f"driver: crashing on purpose; work directory {kept / 's5'} (kept"
    )
    assert sorted(path.name for path in kept.iterdir()) == ["s4", "s5"]
    assert (
        (kept / "s4" / "params.in")
        .read_text()
        .endswith(f"{3_000_005:>43d} eval_id\n{0:>43d} metadata\n")
    )
    assert np.isnan(result.objective[:2]).all() and not np.isnan(result.objective[2:]).any()


def test_a_failure_stops_the_run_under_stop(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIL_EVERY", "7")
    spec = command_spec(tmp_path, keep_work="none")
    with pytest.raises(EvaluationError) as raised:
        evaluate(spec, [5, 7])
    folder = work(tmp_path) / "default/me/d/seed0/g3/s5"
    assert str(raised.value) == (
        "run me/d/seed0, generation 3, shard 1, solution 5: results file results.out: "
        f"line 1 says fail; work directory {folder} removed (keep_work: none)"
    )
    assert not list(work(tmp_path).glob("*/*/*/*/g*/s*"))


def test_a_crashed_program_is_retried(tmp_path, monkeypatch):
    monkeypatch.setenv("CRASH_EVERY", "11")
    monkeypatch.setenv("CRASH_ONCE", str(tmp_path))
    spec = command_spec(tmp_path, evaluation={"on_failure": "retry"})
    result = evaluate(spec, [11, 5])
    assert result.status is None and list(result.attempts) == [2, 1]
    assert result.objective[0] == expected_objective(SOLUTIONS[0], 11)
    assert not list(work(tmp_path).glob("*/*/*/*/g*/s*"))


def test_a_batch_fails_only_the_solutions_its_results_file_names(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIL_EVERY", "7")
    command = [sys.executable, str(DRIVER), "--results", "json", "{params}", "{results}"]
    spec = command_spec(
        tmp_path,
        command=command,
        batch=True,
        params_format="json",
        results_format="json",
        evaluation={"on_failure": "discard"},
    )
    seeds = [5, 14, 6, 8]
    result = evaluate(spec, seeds)
    assert list(result.status) == [0, STATUS["failed"], 0, 0]
    kept = work(tmp_path) / "default/me/d/seed0/g3/shard1"
    assert result.messages == {
        5: "run me/d/seed0, generation 3, shard 1, solution 5: results file results.out: "
        f"evaluation 1 of the file says fail; work directory {kept} (kept, program.log holds "
        "the output)"
    }
    for k in (0, 2, 3):
        assert result.objective[k] == expected_objective(SOLUTIONS[k], seeds[k], written="json")
    monkeypatch.setenv("CRASH_EVERY", "5")  # the program itself fails: the whole batch
    result = evaluate(spec, seeds)
    assert list(result.status) == [STATUS["crashed"]] * 4


def test_work_directories_are_bounded_and_made_from_the_template(tmp_path, monkeypatch):
    """keep_work_max 2: the third failure's work directory is removed, and the message
    says why; the template's files are in every work directory (linked here)."""
    monkeypatch.setenv("FAIL_EVERY", "1")
    template = tmp_path / "template"
    (template / "sub").mkdir(parents=True)
    (template / "mesh.dat").write_text("mesh")
    spec = command_spec(
        tmp_path,
        template=str(template),
        template_files="link",
        keep_work_max=2,
        evaluation={"on_failure": "discard"},
    )
    result = evaluate(spec, [1, 2, 3])
    kept = work(tmp_path) / "default/me/d/seed0/g3"
    assert sorted(path.name for path in kept.iterdir()) == ["s4", "s5"]
    assert (kept / "s4" / "mesh.dat").resolve() == template / "mesh.dat"
    assert result.messages[6].endswith(
        f"work directory {kept / 's6'} removed: 2 of this run's are kept already "
        f"(keep_work_max) under {work(tmp_path) / 'default/me/d/seed0'}"
    )


@pytest.mark.parametrize(
    ("domain", "problem"),
    [
        ({"command": "run {param}"}, "key 'domains.d.command': unknown placeholder {param}"),
        ({"command": "run", "chunk_size": 4}, "key 'domains.d.chunk_size': a program evaluates"),
        ({"command": "run {seed}", "batch": True}, "key 'domains.d.command': {seed} names one"),
        ({"command": "./missing.sh"}, "key 'domains.d.command': the program"),
        ({"variables": ["a", "b"], "command": "run"}, "key 'domains.d.variables': 2 names"),
        ({}, "key 'domains.d.command': required for type command"),
    ],
)
def test_command_domains_are_checked(tmp_path, monkeypatch, domain, problem):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").write_text("#!/bin/sh\n")
    (tmp_path / "run").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}")
    entry = {"type": "command", "solution_dim": 3, "measure_ranges": [[0, 1]], **domain}
    with pytest.raises(ConfigError) as raised:
        validate_config(
            {
                "algorithms": {"me": {"type": "map_elites"}},
                "domains": {"d": entry},
            }
        )
    assert problem in str(raised.value)


def test_command_keys_belong_to_command_domains():
    with pytest.raises(ConfigError) as raised:
        validate_config(
            {
                "algorithms": {"me": {"type": "map_elites"}},
                "domains": {"d": {"type": "sphere", "keep_work": "all"}},
            }
        )
    assert "key 'domains.d.keep_work': only allowed for type command, not sphere" in str(
        raised.value
    )


def test_where_and_how_a_program_runs_are_step_settings_not_the_run_spec(tmp_path):
    """work_root, keep_work, keep_work_max and launcher change no result: the run spec
    leaves them out (so changing them reruns nothing and keeps every checkpoint), the
    step settings carry them to every step, and the program takes them from there."""
    launcher = tmp_path / "launch"
    launcher.write_text('#!/bin/sh\necho launched > "$EVOCAMP_WORKDIR/launcher.log"\nexec "$@"\n')
    launcher.chmod(0o755)
    domain = {"keep_work": "all", "keep_work_max": 3, "launcher": str(launcher)}
    config = command_config(tmp_path, **domain)
    spec = run_spec(config, algorithm="me", domain="d", seed=0)
    assert not set(LOCAL_KEYS) & set(spec["domain_spec"])
    settings = StepSettings.from_json(StepSettings.from_config(config).to_json())
    assert settings.programs == {"d": {"work_root": str(tmp_path / "scratch"), **domain}}
    result = evaluate_slice(
        resolve_run(spec),
        generation=3,
        shard=1,
        start=4,
        solutions=SOLUTIONS[:1],
        seeds=np.array([5], dtype=np.uint64),
        settings=settings,
    )
    assert result.status is None  # no call failed
    folder = work(tmp_path) / "default/me/d/seed0/g3/s4"
    assert (folder / "launcher.log").read_text() == "launched\n"  # kept, launched


def test_the_json_parameters_file_and_the_environment(tmp_path):
    """keep_work all: the work directory stays, with the template's files copied, the
    JSON parameters (every digit, ids, seed, run) and what the program saw of its
    placeholders and environment."""
    shell = 'echo "$EVOCAMP_SEED $EVOCAMP_EVAL_ID $EVOCAMP_WORKDIR {seed} {eval_id} {ranks}"'
    command = ["sh", "-c", shell + "; printf '1\\n2\\n3\\n' > {results}"]
    template = tmp_path / "template"
    (template / "case").mkdir(parents=True)
    (template / "case" / "mesh.dat").write_text("mesh")
    spec = command_spec(
        tmp_path, command=command, params_format="json", keep_work="all", template=str(template)
    )
    evaluate(spec, [77], start=9)
    folder = work(tmp_path) / "default/me/d/seed0/g3/s9"
    copied = folder / "case" / "mesh.dat"  # template_files: copy (the default)
    assert copied.read_text() == "mesh" and not copied.is_symlink()
    assert not (folder / "case").is_symlink()
    assert json.loads((folder / "params.in").read_text()) == {
        "variables": {f"x{i + 1}": float(v) for i, v in enumerate(SOLUTIONS[0])},
        "eval_id": 3_000_010,
        "seed": 77,
        "generation": 3,
        "solution": 9,
        "run": "me/d/seed0",
    }
    assert (folder / "program.log").read_text() == f"77 3000010 {folder} 77 3000010 1\n"
