"""The keys of ``type: command`` domains (docs/programs.md, "The keys") and their checks:
their shape (:func:`command_problems`, with a search space's; the launcher and ranks)
and what a program needs on this machine (:func:`program_problems`); which of them are
step settings (:data:`LOCAL_KEYS`: where and how the program runs here)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from evocamp.base.files import unwritable_reason
from evocamp.tasks import program_files
from evocamp.tasks.programs import ANY_PLACEHOLDER, PLACEHOLDERS, command_words, work_root

#: The keys of a ``type: command`` domain that say where and how its program runs on
#: this machine and change none of its results: step settings
#: (:class:`~evocamp.loop.step_settings.StepSettings`, ``programs``), never part of
#: the run spec, so that changing them reruns nothing.
LOCAL_KEYS = ("work_root", "keep_work", "keep_work_max", "launcher")

#: The domain keys only ``type: command`` takes.
COMMAND_KEYS = (
    "command",
    "variables",
    "params_format",
    "results_format",
    "sense",
    "template",
    "template_files",
    "work_root",
    "keep_work",
    "keep_work_max",
    "batch",
    "ranks",
    "launcher",
)


def _launcher_problems(key: str, domain: dict, command: str) -> list[str]:
    """What is wrong with a command domain's ``launcher`` and ``ranks``."""
    try:
        launcher = " ".join(command_words(domain.get("launcher") or ""))
    except ValueError as error:
        return [f"key '{key}.launcher': cannot be split into words ({error})"]
    problems = [
        f"key '{key}.launcher': unknown placeholder {{{name}}} (placeholders: {{ranks}})"
        for name in re.findall(r"\{([^{}]*)\}", launcher)
        if name != "ranks"
    ]
    words = launcher.split()
    if words and Path(words[0]).name == "srun" and "--overlap" not in words:
        problems.append(
            f"key '{key}.launcher': srun without --overlap waits for ever inside a shard job "
            "(the Slurm job step running the shard holds the job's CPUs): write "
            '"srun --overlap --exact -n {ranks}"'
        )
    ranks = domain.get("ranks") or 1
    if ranks > 1 and "{ranks}" not in launcher + command:
        problems.append(
            f"key '{key}.ranks': {ranks} ranks, but neither the launcher nor the command "
            'says {ranks} (e.g. launcher: "mpirun -n {ranks}")'
        )
    return problems


def command_problems(key: str, domain: dict, *, space: list[dict] | None = None) -> list[str]:
    """What is wrong with a ``type: command`` domain entry ``key`` (its shape: the
    schema checked the types of its values); ``space``: its search space's parameters
    (complete dicts), when it has one that can be read."""
    problems = [
        f"key '{key}.{required}': required for type command"
        for required in ("command", "measure_ranges")
        if required not in domain
    ]
    if "command" not in domain:
        return problems
    try:
        words = command_words(domain["command"])
    except ValueError as error:
        return [*problems, f"key '{key}.command': cannot be split into words ({error})"]
    if not words:
        problems.append(f"key '{key}.command': names no program")
    text = " ".join(words)
    names = [entry["name"] for entry in space or ()]
    conditional = {entry["name"] for entry in space or () if entry["condition"]}
    for name in dict.fromkeys(ANY_PLACEHOLDER.findall(text)):
        if name not in (*PLACEHOLDERS, *names):
            problems.append(
                f"key '{key}.command': unknown placeholder {{{name}}} (placeholders: "
                + ", ".join(f"{{{p}}}" for p in (*PLACEHOLDERS, *names))
                + ")"
            )
        elif name in conditional:
            problems.append(
                f"key '{key}.command': {{{name}}} names a conditional parameter, absent when "
                "inactive: read it from the parameters file"
            )
        elif domain.get("batch") and name in ("seed", "eval_id", *names):
            problems.append(
                f"key '{key}.command': {{{name}}} names one evaluation, and a batch holds "
                f"several: read each one's from the parameters file (params_format: json)"
            )
    if not domain.get("batch") and domain.get("chunk_size", 1) != 1:
        problems.append(
            f"key '{key}.chunk_size': a program evaluates one solution per call; "
            "batch: true calls it once for chunk_size solutions"
        )
    if space is not None:
        problems += _space_problems(key, domain, space)
    problems += _launcher_problems(key, domain, text)
    variables = domain.get("variables")
    if variables is not None and "solution_dim" in domain:
        if len(variables) != domain["solution_dim"]:
            problems.append(
                f"key '{key}.variables': {len(variables)} names for solution_dim "
                f"{domain['solution_dim']}"
            )
    return problems


def _space_problems(key: str, domain: dict, space: list[dict]) -> list[str]:
    """``variables`` beside a space, a parameter named as a placeholder, a name or a
    choice Dakota's parameters format cannot hold."""
    problems = [f"key '{key}.variables': the space names the parameters; leave variables out"]
    problems = problems if "variables" in domain else []
    problems += [
        f"key '{key}.space': parameter '{name}' is named as the placeholder {{{name}}}; rename it"
        for name in (entry["name"] for entry in space)
        if name in PLACEHOLDERS
    ]
    if domain.get("params_format", "dakota") == "dakota":
        problems += [f"key '{key}.space': {line}" for line in program_files.dakota_problems(space)]
    return problems


def program_problems(key: str, domain: dict) -> list[str]:
    """What is missing on this machine for a ``type: command`` domain entry ``key``:
    its program, its template folder, a writable work root (paths relative to the
    working directory, as where the campaign runs)."""
    problems = []
    words = command_words(domain["command"])
    program = words[0]
    here = Path.cwd()
    if "/" in program:
        path = here / program
        if not path.is_file() or not os.access(path, os.X_OK):
            state = "is not executable" if path.is_file() else "does not exist"
            problems.append(f"key '{key}.command': the program {path} {state}")
    elif (
        shutil.which(program, path=os.pathsep.join([os.environ.get("PATH", ""), str(here)])) is None
    ):
        problems.append(f"key '{key}.command': the program {program} is not on PATH")
    if domain.get("template") and not (here / domain["template"]).is_dir():
        problems.append(f"key '{key}.template': {here / domain['template']} is no folder")
    if domain.get("work_root"):
        reason = unwritable_reason(work_root(domain["work_root"]))
        if reason:
            problems.append(f"key '{key}.work_root': {reason}")
    return problems
