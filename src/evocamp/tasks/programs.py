"""Evaluating solutions with a program (``type: command`` domains, docs/programs.md).

:class:`Program` is a ``type: command`` domain's evaluation function: for each
solution (or each batch, ``batch: true``) it makes a work directory
``<work_root>/evocamp-work/<run>/g<generation>/s<solution>`` (from the ``template``
folder, its files copied or linked), writes the parameters file, runs the program there
(its standard output and error to ``program.log`` in it), reads the results file
(:mod:`evocamp.tasks.program_files`) and removes the directory, or keeps it after a
failure (``keep_work``), at most ``keep_work_max`` of them per run.

A domain with a search space (``space:``) gives the program each solution as its
configuration: the parameters file names the active parameters with their typed
values (:mod:`evocamp.tasks.program_files`), and ``{name}`` in the command is a
parameter's value.

A failure raises :class:`~evocamp.base.errors.EvaluationError` (a results file that says
``fail`` or cannot be read) or :class:`~evocamp.base.errors.ProgramCrashed` (a non-zero
exit status, a signal), naming the solution, the work directory, the offending line
and the tail of the program's output; in a batch, the solutions the results file names
as failed come back in :data:`FAILED_ROWS` and the others are evaluated.

The program is started without a session of its own: it belongs to the process group of
the evaluation that starts it, which the supervisor ends as a whole.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evocamp.base.errors import EvaluationError, ProgramCrashed
from evocamp.base.lanes import LANE_VARIABLES
from evocamp.base.process_table import MARKER_VARIABLE
from evocamp.model.space import Space
from evocamp.tasks import program_files
from evocamp.tasks.program_files import Evaluation

#: Key of the outputs that maps a failed solution's offset in the call to its message.
FAILED_ROWS = "_failed_rows"
#: Names of the files in a work directory (Dakota's).
PARAMETERS_FILE = "params.in"
RESULTS_FILE = "results.out"
PROGRAM_LOG = "program.log"
#: The folder under the work root that holds every work directory.
WORK_FOLDER = "evocamp-work"
#: Placeholders of ``command`` (with a space, its parameters' names too).
PLACEHOLDERS = ("params", "results", "workdir", "seed", "ranks", "eval_id")
#: A placeholder of a command word: ``{name}``.
ANY_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
#: Lines of the program's output quoted in a failure's message.
TAIL_LINES = 3
#: Default of ``keep_work_max``: work directories kept per run.
DEFAULT_KEEP_WORK_MAX = 20
#: Solutions per generation that number evaluation ids (``generation * 10**6 + i + 1``).
EVAL_ID_STRIDE = 1_000_000


@dataclass(frozen=True)
class ProgramCall:
    """Where one call of a program's evaluation function is (the shard step makes it):
    the run, the work directories' folder, each solution's index, evaluation id and
    place (what messages name), and the batch directory's name."""

    run: str
    #: The run's label, ``<algorithm>/<domain>/seed<k>`` (JSON parameters files' ``run``).
    label: str
    folder: str
    generation: int
    indices: tuple[int, ...]
    eval_ids: tuple[int, ...]
    places: tuple[str, ...]
    whole: str
    batch_name: str


def command_words(command: str | list) -> list[str]:
    """A ``command`` key as its words (a string is split as a shell would, without one)."""
    return shlex.split(command) if isinstance(command, str) else [str(word) for word in command]


def work_root(setting: str | None) -> Path:
    """The folder work directories go under: ``work_root`` when set, else ``$TMPDIR``
    when it is set and writable (node-local scratch on most clusters), else the
    campaign's working directory."""
    if setting:
        return Path(os.path.expandvars(setting)).expanduser().resolve()
    scratch = os.environ.get("TMPDIR")
    if scratch and os.path.isdir(scratch) and os.access(scratch, os.W_OK | os.X_OK):
        return Path(scratch).resolve()
    return Path.cwd()


def campaign_folder(directory: Path) -> str:
    """The folder of one campaign directory's work directories under ``evocamp-work``:
    the directory's name and a digest of its path, so that two campaigns of the same
    name run from two folders on one node never share work directories."""
    digest = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:8]
    return f"{directory.name}-{digest}"


class Program:
    """The evaluation function of a resolved ``type: command`` domain spec.

    It is made where the evaluation runs: relative paths of ``template``,
    ``python_path`` and of the command's words that name existing files are resolved
    against that process's working directory (the campaign's), which is also added at
    the end of the program's ``PATH``, as Dakota does. ``local``: the domain's
    :data:`~evocamp.tasks.program_keys.LOCAL_KEYS` as the step settings give them
    (where work directories go, which are kept, the launcher), over any a run spec
    holds.
    """

    def __init__(self, domain: dict, *, local: dict | None = None) -> None:
        here = Path.cwd()
        # Where and how the program runs here (LOCAL_KEYS): the step settings' (``local``)
        # over a run spec's (written by versions that kept them there).
        domain = {**domain, **(local or {})}
        self.space = Space(domain["space"]) if domain.get("space") else None
        if self.space is not None:
            self.variables = self.space.names
            self.kinds = program_files.dakota_kinds(self.space.entries)
        else:
            dim = int(domain["solution_dim"])
            self.variables = list(domain.get("variables") or [f"x{i + 1}" for i in range(dim)])
            self.kinds = dict.fromkeys(self.variables, "continuous")
        self.words = [_resolved_word(word, here) for word in command_words(domain["command"])]
        if not any("{params}" in word or "{results}" in word for word in self.words):
            self.words += [PARAMETERS_FILE, RESULTS_FILE]  # as Dakota calls analysis drivers
        # The launcher starts the program's ranks: its words go first, not resolved.
        self.words = command_words(domain.get("launcher") or "") + self.words
        self.ranks = str(int(domain.get("ranks") or 1))
        self.measure_dim = len(domain.get("measure_ranges") or [])
        self.extra_fields = list(domain.get("extra_fields") or [])
        self.responses = program_files.response_names(self.measure_dim, self.extra_fields)
        self.params_format = domain.get("params_format", "dakota")
        self.results_format = domain.get("results_format", "dakota")
        self.batch = bool(domain.get("batch", False))
        self.minimise = domain.get("sense", "maximise") == "minimise"
        template = domain.get("template")
        self.template = (here / template).resolve() if template else None
        self.link = domain.get("template_files", "copy") == "link"
        self.keep = domain.get("keep_work", "failed")
        self.keep_max = int(domain.get("keep_work_max", DEFAULT_KEEP_WORK_MAX))
        self.root = work_root(domain.get("work_root")) / WORK_FOLDER / campaign_folder(here)
        self.generation_folders: set[Path] = set()  # those this process made work in
        self.environment = dict(os.environ)
        self.environment["PATH"] = os.pathsep.join(
            [*filter(None, [self.environment.get("PATH")]), str(here)]
        )
        if domain.get("python_path"):
            paths = [str((here / domain["python_path"]).resolve())]
            self.environment["PYTHONPATH"] = os.pathsep.join(
                [*paths, *filter(None, [self.environment.get("PYTHONPATH")])]
            )

    def __call__(self, solutions, seeds, *, call: ProgramCall) -> dict:
        """Evaluate ``solutions`` (one call of the program each, or one for all with
        ``batch: true``); ``call`` names them."""
        solutions = np.asarray(solutions, dtype=np.float64)
        if self.space is not None:
            values = self.space.configurations(solutions)
        else:
            values = [dict(zip(self.variables, map(float, row), strict=True)) for row in solutions]
        evaluations = [
            Evaluation(
                values=values[k],
                eval_id=call.eval_ids[k],
                seed=int(seeds[k]),
                generation=call.generation,
                solution=call.indices[k],
            )
            for k in range(len(solutions))
        ]
        if self.batch:
            rows = self._run(evaluations, call=call, name=call.batch_name, places=call.places)
        else:
            rows = []
            for k, evaluation in enumerate(evaluations):
                name = f"s{call.indices[k]}"
                rows += self._run([evaluation], call=call, name=name, places=call.places[k : k + 1])
        return self._outputs(rows)

    def _outputs(self, rows: list[tuple | str]) -> dict:
        """The evaluation function's dict; failed rows NaN and named in FAILED_ROWS."""
        width = len(self.responses)
        table = np.array(
            [row if not isinstance(row, str) else (np.nan,) * width for row in rows],
            dtype=np.float64,
        ).reshape(len(rows), width)
        if self.minimise:
            table[:, 0] = -table[:, 0]
        outputs = {
            "objective": table[:, 0],
            "measures": table[:, 1 : 1 + self.measure_dim],
        }
        for j, name in enumerate(self.extra_fields):
            outputs[name] = table[:, 1 + self.measure_dim + j]
        failed = {k: row for k, row in enumerate(rows) if isinstance(row, str)}
        if failed:
            outputs[FAILED_ROWS] = failed
        return outputs

    def _run(
        self, evaluations: list[Evaluation], *, call: ProgramCall, name: str, places: tuple
    ) -> list[tuple | str]:
        """Run the program once for ``evaluations``; their values, or for a batch the
        messages of the solutions its results file says failed."""
        folder = self._work_directory(call, name)
        text = program_files.parameters_text(
            evaluations,
            params_format=self.params_format,
            kinds=self.kinds,
            responses=self.responses,
            run=call.label,
            batch=self.batch,
        )
        (folder / PARAMETERS_FILE).write_text(text)
        first = evaluations[0]
        values = {
            **({} if self.space is None else {k: _word(v) for k, v in first.values.items()}),
            "params": PARAMETERS_FILE,
            "results": RESULTS_FILE,
            "workdir": str(folder),
            "seed": str(first.seed),
            "ranks": self.ranks,
            "eval_id": str(first.eval_id),
        }
        argv = [
            ANY_PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), word)
            for word in self.words
        ]
        environment = dict(self.environment, EVOCAMP_WORKDIR=str(folder))
        passed = (*LANE_VARIABLES, MARKER_VARIABLE)  # the lane's, the supervised child's
        environment.update({name: os.environ[name] for name in passed if name in os.environ})
        if not self.batch:
            environment.update(EVOCAMP_SEED=values["seed"], EVOCAMP_EVAL_ID=values["eval_id"])
        whole = places[0] if len(places) == 1 else call.whole
        try:
            with open(folder / PROGRAM_LOG, "wb") as log:
                status = subprocess.run(
                    argv,
                    cwd=folder,
                    env=environment,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    check=False,
                ).returncode
        except OSError as error:
            raise EvaluationError(
                f"{whole}: the program {shlex.quote(argv[0])} cannot be started "
                f"({error.strerror or error}){self._after_failure(folder)}"
            ) from None
        if status != 0:
            what = (
                f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
            )
            raise ProgramCrashed(
                f"{whole}: the program {what} (command: {shlex.join(argv)})"
                f"{self._after_failure(folder)}"
            )
        rows = self._results(folder, len(evaluations), whole=whole)
        failed = [k for k, row in enumerate(rows) if isinstance(row, str)]
        if failed and not self.batch:
            raise EvaluationError(f"{whole}: {rows[0]}{self._after_failure(folder)}")
        if failed:
            kept = self._after_failure(folder)
            return [
                f"{places[k]}: {row}{kept}" if isinstance(row, str) else row
                for k, row in enumerate(rows)
            ]
        self._after_success(folder)
        return rows

    def _results(self, folder: Path, count: int, *, whole: str) -> list[tuple | str]:
        """Every evaluation's values or message; the whole call fails when the file is
        missing, unreadable or holds the wrong number of evaluations."""
        path = folder / RESULTS_FILE
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise EvaluationError(
                f"{whole}: the program wrote no results file {RESULTS_FILE}"
                f"{self._after_failure(folder)}"
            ) from None
        except (OSError, UnicodeDecodeError) as error:
            raise EvaluationError(
                f"{whole}: the results file {RESULTS_FILE} cannot be read ({error})"
                f"{self._after_failure(folder)}"
            ) from None
        rows = program_files.read_results(
            text,
            results_format=self.results_format,
            responses=self.responses,
            measure_dim=self.measure_dim,
            count=count,
            batch=self.batch,
        )
        if isinstance(rows, str):
            raise EvaluationError(
                f"{whole}: results file {RESULTS_FILE}: {rows}{self._after_failure(folder)}"
            )
        return [
            row if not isinstance(row, str) else f"results file {RESULTS_FILE}: {row}"
            for row in rows
        ]

    # work directories

    def _work_directory(self, call: ProgramCall, name: str) -> Path:
        """A fresh work directory (what an earlier, killed attempt left is removed)."""
        folder = self.root / call.run / call.folder / name
        if folder.exists():
            shutil.rmtree(folder)
        if folder.parent not in self.generation_folders:
            self.generation_folders.add(folder.parent)
            _remove_empty_folders(folder.parent.parent, but=folder.parent.name)
        for _ in range(5):  # another shard may remove an empty parent meanwhile
            try:
                folder.mkdir(parents=True)
                break
            except FileNotFoundError:
                continue
        else:
            folder.mkdir(parents=True)
        if self.template is not None:
            for entry in sorted(self.template.iterdir()):
                target = folder / entry.name
                if self.link:
                    target.symlink_to(entry)
                elif entry.is_dir():
                    shutil.copytree(entry, target, symlinks=True)
                else:
                    shutil.copy2(entry, target)
        return folder

    def _after_success(self, folder: Path) -> None:
        if self.keep != "all" or not self._room_for(folder):
            self._remove(folder)

    def _after_failure(self, folder: Path) -> str:
        """Keep or remove a failed call's work directory; what the message adds: the
        tail of the program's output and where the directory is (or why it is gone)."""
        tail = _tail(folder / PROGRAM_LOG)
        said = f"; program output ends: {tail}" if tail else ""
        if self.keep == "none":
            self._remove(folder)
            return f"{said}; work directory {folder} removed (keep_work: none)"
        if not self._room_for(folder):
            self._remove(folder)
            return (
                f"{said}; work directory {folder} removed: {self.keep_max} of this run's "
                f"are kept already (keep_work_max) under {folder.parent.parent}"
            )
        return f"{said}; work directory {folder} (kept, {PROGRAM_LOG} holds the output)"

    def _room_for(self, folder: Path) -> bool:
        """Whether ``folder`` is among the first ``keep_work_max`` kept of its run."""
        run = folder.parent.parent
        kept = sum(1 for _ in run.glob("*/*"))
        return kept <= self.keep_max

    def _remove(self, folder: Path) -> None:
        """Remove a work directory (its generation folder, left empty, is removed when
        the run's next generation starts: removing and making it again for every
        evaluation would cost 5 ms each on a disk)."""
        shutil.rmtree(folder, ignore_errors=True)


def _remove_empty_folders(run: Path, *, but: str) -> None:
    """Remove the run's empty generation folders (but ``but``)."""
    try:
        folders = [entry for entry in os.scandir(run) if entry.name != but]
    except FileNotFoundError:
        return
    for entry in folders:
        try:
            os.rmdir(entry.path)
        except OSError:  # not empty, or removed by another shard
            continue


def _word(value) -> str:
    """A parameter's value in the command line: a real with every digit (Python's
    shortest form that reads back as the same float), a boolean as YAML writes it."""
    return repr(value) if isinstance(value, float) else program_files.dakota_string(value)


def _resolved_word(word: str, here: Path) -> str:
    """A command word naming an existing file or folder relative to ``here``, made
    absolute (the program runs in its work directory)."""
    if ANY_PLACEHOLDER.search(word) or os.path.isabs(word) or word.startswith("-"):
        return word
    path = here / word
    if ("/" in word or os.sep in word or path.is_file()) and path.exists():
        return str(path.resolve())
    return word


def _tail(path: Path) -> str:
    """The last :data:`TAIL_LINES` non-empty lines of a program's output, on one line."""
    try:
        with open(path, "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - 4096))
            lines = file.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    lines = [line.strip() for line in lines if line.strip()][-TAIL_LINES:]
    text = " | ".join(lines)
    return text if len(text) <= 300 else "..." + text[-297:]


def program_call(
    *,
    run: str,
    label: str,
    generation: int,
    indices: list[int],
    places: list[str],
    whole: str,
    shard: int | None,
    evaluation: int | None,
    reevaluation: bool,
    whole_shard: bool,
) -> ProgramCall:
    """The :class:`ProgramCall` of solutions ``indices`` of ``generation`` of run
    ``label`` (``run``: its folder, ``<campaign>/<label>``; an
    asynchronous run's ``evaluation``; the final re-evaluation's elites).

    Evaluation ids: an asynchronous run's evaluation number + 1; else
    ``generation * 1,000,000 + solution + 1`` (re-evaluation: ``solution + 1``), so an
    id says which solution it is whatever the shard, and stays the same on a rerun.
    """
    if evaluation is not None:
        eval_ids = [evaluation + 1]
    elif reevaluation:
        eval_ids = [index + 1 for index in indices]
    else:
        eval_ids = [generation * EVAL_ID_STRIDE + index + 1 for index in indices]
    if shard is None:
        batch_name = f"s{indices[0]}"
    elif whole_shard:
        batch_name = f"shard{shard}"
    else:
        batch_name = f"shard{shard}-s{indices[0]}"
    return ProgramCall(
        run=run,
        label=label,
        folder=f"{'r' if reevaluation else 'g'}{generation}",
        generation=generation,
        indices=tuple(indices),
        eval_ids=tuple(eval_ids),
        places=tuple(places),
        whole=whole,
        batch_name=batch_name,
    )
