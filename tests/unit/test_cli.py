"""The ``evocamp`` program as a user meets it: ``--help`` of the program and of every
command, its reference page (docs/cli.md) and its one-line errors."""

from __future__ import annotations

import subprocess

from conftest import REPO

from evocamp.cli import build_parser, main
from evocamp.cli_reference import _commands, commands_reference
from evocamp.reporting.reference import render

COMMANDS = sorted(_commands(build_parser()))


def test_help_of_the_program_and_of_every_command_exits_0_with_its_usage():
    """The installed ``evocamp`` in real processes, started at once (2 cores): help texts
    go through argparse's %-formatting, where compare's "95%" once crashed --help."""
    calls = [["--help"], ["-h"]] + [[name, "--help"] for name in COMMANDS]
    processes = [
        subprocess.Popen(["evocamp", *call], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for call in calls
    ]
    printed = []
    for call, process in zip(calls, processes, strict=True):
        out, err = (stream.decode() for stream in process.communicate(timeout=120))
        assert process.returncode == 0, (call, err)
        assert err == ""
        command = " ".join(["evocamp", *call[:-1]])
        assert out.startswith(f"usage: {command} [-h]"), (call, out)
        printed.append(out)
    assert printed[0] == printed[1]
    assert all(f"\n    {name}" in printed[0] for name in COMMANDS)
    assert "metric curves with 95% bootstrap" in printed[0]


def test_cli_reference_is_generated_from_the_parser():
    """docs/cli.md is what --help prints (regenerate: python -m evocamp.cli_reference
    docs/cli.md), linked from the README."""
    text = (REPO / "docs" / "cli.md").read_text()
    assert "<!-- BEGIN generated: commands -->" in text
    assert render(text, blocks={"commands": commands_reference}) == text
    for name in COMMANDS:
        assert f"## evocamp {name}\n\n```text\nusage: evocamp {name} [-h]" in text
    assert "(docs/cli.md)" in (REPO / "README.md").read_text()


def test_status_of_a_folder_that_does_not_exist_is_an_error(tmp_path, capsys):
    missing = tmp_path / "results" / "nope"
    assert main(["status", str(missing)]) == 1
    assert capsys.readouterr().err == (
        f"evocamp: error: campaign folder {missing} does not exist: name a campaign folder "
        "(e.g. results/default) or a results folder, or run `evocamp status` where you run "
        "snakemake\n"
    )
    (tmp_path / "file").write_text("")
    assert main(["status", str(tmp_path / "file")]) == 1
    assert f"{tmp_path / 'file'} is not a folder" in capsys.readouterr().err
    (tmp_path / "results").mkdir(exist_ok=True)
    assert main(["status", str(tmp_path / "results")]) == 0
    assert capsys.readouterr().out == f"no runs under {tmp_path / 'results'} yet\n"


KEEP_ARGS = ["keep", "--state", "s", "--checkpoint", "c", "--metrics-window", "m", "--logs", "l"]


def test_step_settings_reach_a_step_through_one_variable(monkeypatch):
    """The campaign keys that are no part of the run spec (generations,
    evaluation.max_failed_fraction, checkpoint_full_every, storage) travel in one JSON
    variable, which the step commands' defaults read; unset, the defaults."""
    import copy

    from campaigns import SMALL_CAMPAIGN

    from evocamp.config import validate_config
    from evocamp.files.evaluations import StorageSettings
    from evocamp.loop.step_settings import STEP_VARIABLE, StepSettings

    config = copy.deepcopy(SMALL_CAMPAIGN)
    config.update(
        generations=9,
        checkpoint_full_every=4,
        evaluation={"max_failed_fraction": 0.25},
        storage={"keep_evaluations": True, "max_solution_params": 3},
    )
    settings = StepSettings.from_config(validate_config(config, check_plugins=False))
    assert settings == StepSettings(
        generations=9,
        max_failed_fraction=0.25,
        full_every=4,
        storage=StorageSettings(keep=True, max_solution_params=3),
    )
    monkeypatch.delenv(STEP_VARIABLE, raising=False)
    assert StepSettings.current() == StepSettings()
    args = build_parser().parse_args(KEEP_ARGS)
    assert (args.total, args.full_every) == (None, 1)
    monkeypatch.setenv(STEP_VARIABLE, settings.to_json())
    assert StepSettings.current() == settings
    args = build_parser().parse_args(KEEP_ARGS)
    assert (args.total, args.full_every) == (9, 4)
    # Every command gets them as one typed value, read once (the evaluate command
    # passes them to the shard step: its evaluations at once and their GPUs).
    assert args.settings == settings
    lanes = StepSettings(concurrency=3, gpus_per_evaluation=1)
    monkeypatch.setenv(STEP_VARIABLE, lanes.to_json())
    evaluate = ["evaluate", "--state", "s.h5", "--shard", "0", "--shards", "2", "--output", "o"]
    assert build_parser().parse_args(evaluate).settings == lanes


def test_no_other_environment_variable_of_evocamp_carries_a_setting():
    """One channel: the step settings' variable is the only ``EVOCAMP_`` name the
    package and the workflow spell, but for two settings of the machine (the state
    cache's folder, warm start), which the workflow never sets, and what a user's
    program is given."""
    import re

    spelt = {}
    for path in [*(REPO / "src" / "evocamp").rglob("*.py"), *(REPO / "workflow").rglob("*.smk")]:
        for name in re.findall(r"EVOCAMP_[A-Z_]+", path.read_text()):
            spelt.setdefault(name, set()).add(path.name)
    assert spelt == {
        "EVOCAMP_STEP": {"step_settings.py"},
        "EVOCAMP_STATE_CACHE": {"state_cache.py"},
        "EVOCAMP_WARM_START": {"warmstart.py"},
        # What evocamp gives a user's program (docs/programs.md): set, never read.
        "EVOCAMP_WORKDIR": {"programs.py"},
        "EVOCAMP_SEED": {"programs.py"},
        "EVOCAMP_EVAL_ID": {"programs.py"},
        "EVOCAMP_LANE": {"lanes.py"},  # its lane (evaluation.concurrency)
        # The token of the supervised child it runs in (ending what left its tree).
        "EVOCAMP_SUPERVISED": {"process_table.py"},
    }
