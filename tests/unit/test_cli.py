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
