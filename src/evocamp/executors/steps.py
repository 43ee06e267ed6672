"""The pipeline's step commands: what each Snakemake job of the generation loop does.

Each function is one ``python -m evocamp <step>`` (:mod:`evocamp.cli` parses the
arguments); every one can be run by hand. Messages go to standard error, which the
rules send to the job's log; per-generation progress lines also go to standard output
(Snakemake's terminal).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from evocamp.base.errors import CorruptFileError, EvaluationError
from evocamp.base.files import atomic_write_text
from evocamp.catalogue.factory import resolve_run
from evocamp.executors.housekeeping import fold_logs, prune_work_files
from evocamp.files.archive import write_final_archive
from evocamp.files.checkpoint import read_state, with_stored_elites, write_state
from evocamp.files.completions import read_completions
from evocamp.files.evaluations import (
    EvaluationRows,
    StorageSettings,
    concatenate,
    held,
    record_window_rows,
)
from evocamp.files.journal import remove_journal
from evocamp.files.reevaluation import read_reevaluation, write_reevaluation
from evocamp.files.shard import read_shard, write_shard
from evocamp.loop.asynchronous import asynchronous_settings, initialise_asynchronous, replay
from evocamp.loop.engine import evaluation_rows, initialise, optimizer_result, tell

# The evaluate step is the shard step's own (the module of the whole shard step).
from evocamp.loop.evaluation import evaluate_step as evaluate_step
from evocamp.loop.generation_results import combine_shards
from evocamp.loop.progress import generation_line
from evocamp.loop.reevaluation import combine_reevaluation, reevaluate_shard
from evocamp.loop.state_cache import (
    forget_run,
    keep_whole,
    read_full_state,
    write_told_state,
)
from evocamp.model.layout import KEEP_LOG, METRICS_WINDOW, SHARD, SHARD_FOLDER, RunFolder
from evocamp.model.metrics import merge_history, write_rows
from evocamp.model.runspec import Run, run_label
from evocamp.model.state import RunState


def log(message: str) -> None:
    """A line for the job's log (standard error)."""
    print(message, file=sys.stderr, flush=True)


def progress(line: str) -> None:
    """A per-generation line: into the job's log (stderr) and onto Snakemake's terminal
    (stdout), so long local work is never silent."""
    log(line)
    print(line, flush=True)


def init_step(*, spec: dict, output: str | Path) -> None:
    """Create a run's optimizer and write its generation-0 checkpoint (an asynchronous
    run's holds a proposal for every slot)."""
    state = initialise_asynchronous(spec) if asynchronous_settings(spec) else initialise(spec)
    forget_run(Path(output).parent)  # nothing cached for an earlier run in this folder
    write_state(output, state, run=resolve_run(spec))
    log(
        f"{run_label(spec)}: initialised; batch of {len(state.next_seeds)} solutions "
        f"for generation 1 -> {output}"
    )


def tell_step(
    *,
    state: str | Path,
    shard_files: list[str],
    output: str | Path,
    total: int | None,
    full_every: int = 1,
) -> None:
    """Fold a generation's shards into the archive and write the next state (light,
    with the full state in the node-local cache, between kept generations; a whole
    one's archive a delta of the previous kept checkpoint's when ``full_every``
    allows, :func:`keep_step`). Kept evaluations are not written here: ``keep`` and
    ``finalise`` record them from the shard files and states (:func:`record_window`)."""
    before = read_full_state(state)
    run = resolve_run(before.spec)
    told = tell(before, [read_shard(path) for path in shard_files], run=run)
    written = write_told_state(
        output,
        told,
        run=run,
        told_from=state,
        shard_files=shard_files,
        total=total,
        full_every=full_every,
    )
    log(f"generation {told.generation}: {written}")
    progress(generation_line(told, total=total))


def keep_step(
    *,
    state: str | Path,
    checkpoint: str | Path,
    metrics_window: str | Path,
    logs: str | Path,
    total: int | None = None,
    storage: StorageSettings | None = None,
    full_every: int = 1,
) -> None:
    """Keep a checkpoint (every K-th generation), save its metrics window, record the
    window's evaluations when the run keeps them (``storage``, default:
    the defaults; ``total``: the run's generations), delete the working files of the
    generations it covers and fold their job logs. ``full_every``
    (``checkpoint_full_every``): the kept archive may be a delta of the previous
    kept checkpoint's."""
    kept = read_state(state, with_optimizer=False)
    run = resolve_run(kept.spec)
    keep_whole(state, checkpoint, run=run, full_every=full_every)
    storage = (storage or StorageSettings()).for_run(
        run, generation_size=len(kept.next_seeds), total=total
    )
    # Before the metrics window (the rule's output) and the pruning: a kill in between
    # reruns this step, which records the same rows again in their place.
    record_window(
        RunFolder.holding(checkpoint),
        run=run,
        up_to=kept.generation,
        total=total,
        storage=storage,
    )
    write_rows(metrics_window, kept.metrics_window)
    log(f"generation {kept.generation}: kept {checkpoint}")
    own_log = Path(logs) / KEEP_LOG.name(kept.generation)
    tidy_window(work=Path(state).parent, logs=logs, up_to=kept.generation, own_log=own_log)


def record_window(
    folder: RunFolder,
    *,
    run: Run,
    up_to: int,
    total: int | None,
    storage: StorageSettings | None,
) -> None:
    """Record the evaluations of the generations still in a shard-mode run's working
    folder (``<= up_to``), rebuilt from their files (:func:`stored_rows`), in the
    window's file and, for the run's last generation, ``evaluations.h5`` written as
    the index of the window files
    (:func:`~evocamp.files.evaluations.record_window_rows`); when the run does not
    keep them (``storage`` ``None``), only that index of the windows
    recorded before. Dask and asynchronous modes record their rows in their segment
    jobs, so there the working folder holds no shard files and only the index is left.
    ``run``: the run object the step resolved (once, for every generation)."""
    rows = stored_rows(folder, run=run, up_to=up_to, storage=storage)
    path = record_window_rows(folder, rows, spec=run.spec, generation=up_to, total=total)
    if rows is not None:
        log(f"generation {up_to}: {len(rows)} evaluations recorded in {path}")
    if path == folder.evaluations:
        count, missing = held(path)
        note = f" (none of generation(s) {missing}: not kept then)" if missing else ""
        log(f"generation {up_to}: {count} evaluations in {path}{note}")


def stored_rows(
    folder: RunFolder, *, run: Run, up_to: int, storage: StorageSettings | None
) -> EvaluationRows | None:
    """The evaluation rows of the generations whose shard files are in a run's working
    folder (``<= up_to``), made from files the run has already written (reads only):
    each generation's shard results and the state holding its batch and seeds (the
    working state of the generation before, else its kept checkpoint).

    A generation whose files are incomplete (a kill while its window was being pruned,
    after it was recorded) is passed over; ``None`` without rows or ``storage``.
    """
    if storage is None:
        return None
    blocks = []
    for shard_folder in SHARD_FOLDER.in_folder(folder.work, up_to=up_to):
        generation = SHARD_FOLDER.number_of(shard_folder.name)
        blocks.append(_generation_rows(folder, generation, run=run, storage=storage))
    return concatenate(blocks)


def _generation_rows(
    folder: RunFolder, generation: int, *, run: Run, storage: StorageSettings
) -> EvaluationRows | None:
    """One generation's rows from its shard files and the state of its batch."""
    holders = (folder.work_state(generation - 1), folder.checkpoint(generation - 1))
    batch_state = next((path for path in holders if path.exists()), None)
    shard_files = SHARD.in_folder(folder.work / SHARD_FOLDER.name(generation))
    if batch_state is None or not shard_files:
        return None
    try:
        before = read_state(batch_state, with_optimizer=False)
        shards = [read_shard(path) for path in shard_files]
        if before.spec != run.spec:
            return None
        before.next_batch = with_stored_elites(before.next_batch, run=run, path=batch_state)
        results = combine_shards(run.spec, generation, len(before.next_seeds), shards)
    except (OSError, KeyError, CorruptFileError, EvaluationError):
        return None
    return evaluation_rows(before, results, generation=generation, storage=storage)


def tidy_window(*, work: Path, logs: str | Path, up_to: int, own_log: Path | None = None) -> None:
    """Remove the working files of generations ``<= up_to`` and fold their job logs
    into one window log (the calling job's own log, still open, is left for the next
    fold)."""
    removed = prune_work_files(work, up_to=up_to)
    log(f"generation {up_to}: removed {removed} working files")
    folded = fold_logs(logs, up_to=up_to, own=own_log)
    if folded is not None:
        log(f"generation {up_to}: job logs folded into {folded}")


def write_run_archive(path: str | Path, state: RunState, *, evaluations: int) -> None:
    """Write a run's ``archive.h5`` from its final state (the optimizer's ``result()``
    through the protocol, so a plugin's failure is named)."""
    write_final_archive(
        path,
        spec=state.spec,
        archive=state.archive,
        result=optimizer_result(state.spec, state.generation, state.optimizer),
        best=state.best,
        generation=state.generation,
        evaluations=evaluations,
        numerics=state.numerics,
    )


def finalise_step(
    *,
    state: str | Path,
    checkpoint: str | Path,
    metrics_windows: str | Path,
    metrics: str | Path,
    archive: str | Path,
    summary: str | Path,
    work: str | Path,
    logs: str | Path,
    storage: StorageSettings | None = None,
    reevaluation: str | Path | None = None,
    full_every: int = 1,
) -> None:
    """Write the final archive and metrics.csv of a run, keep its last checkpoint (its
    archive a delta when ``full_every`` allows, :func:`keep_step`) and merge its kept
    evaluations (``storage``, default: the defaults) into
    ``evaluations.h5``; with a ``reevaluation`` file (:func:`reevaluate_step`), the
    summary's final metrics get its corrected metrics beside the raw ones."""
    final_state = read_full_state(state)
    run = resolve_run(final_state.spec)
    if Path(state).resolve() != Path(checkpoint).resolve():
        keep_whole(state, checkpoint, run=run, state=final_state, full_every=full_every)
    rows = merge_history(
        METRICS_WINDOW.in_folder(metrics_windows),
        final_state.metrics_window,
        up_to=final_state.generation,
    )
    write_rows(metrics, rows)
    write_run_archive(archive, final_state, evaluations=int(rows["evaluations"][-1]))
    generation = final_state.generation
    record_window(
        RunFolder(Path(archive).parent),
        run=run,
        up_to=generation,
        total=generation,
        storage=(storage or StorageSettings()).for_run(
            run, generation_size=len(final_state.next_seeds), total=generation
        ),
    )
    final = {name: rows[-1][name].item() for name in rows.dtype.names}
    if reevaluation is not None:
        final.update(read_reevaluation(reevaluation).corrected)
    summary_fields = {
        "run_spec": final_state.spec,
        "final": final,
        "numerics": final_state.numerics,
    }
    text = json.dumps(summary_fields, indent=1, sort_keys=True)
    atomic_write_text(summary, text + "\n")
    log(f"generation {final_state.generation}: final archive {archive}")
    tidy_window(work=Path(work), logs=logs, up_to=final_state.generation)
    forget_run(work)


def reevaluate_shard_step(
    *, state: str | Path, shard: int, shards: int, output: str | Path, repeats: int
) -> None:
    """Evaluate shard ``shard`` of ``shards`` of the elites of a finished run's final
    state ``repeats`` (``evaluation.reevaluate``) more times; write the results as a
    shard file to ``output`` (:mod:`evocamp.loop.reevaluation`)."""
    final_state = read_full_state(state)
    result = reevaluate_shard(
        final_state, repeats=repeats, shard=shard, shards=shards, shard_file=output
    )
    write_shard(output, result)
    remove_journal(output)
    log(
        f"{run_label(final_state.spec)}: elites {result.start}..{result.stop - 1} of "
        f"generation {final_state.generation} evaluated {repeats} times each -> {output}"
    )


def reevaluate_step(
    *, state: str | Path, shard_files: list[str | Path], output: str | Path, repeats: int
) -> None:
    """Combine the re-evaluation shards of a finished run's elites
    (:func:`reevaluate_shard_step`) and write them, with the corrected metrics, to
    ``output``."""
    final_state = read_full_state(state)
    shards = [read_shard(path) for path in shard_files]
    result = combine_reevaluation(final_state, repeats=repeats, shards=shards)
    write_reevaluation(output, final_state.spec, result)
    corrected = ", ".join(f"{name} {value:.6g}" for name, value in result.corrected.items())
    log(
        f"{run_label(final_state.spec)}: {len(result.index)} elites of generation "
        f"{result.generation} evaluated {result.repeats} times each: {corrected} -> {output}"
    )


def replay_step(*, run: str | Path, output: str | Path) -> bool:
    """Tell a finished asynchronous run again from its completion log and write the
    archive it gives to ``output``; returns whether it is bitwise the run's own
    ``archive.h5``."""
    folder = RunFolder(run)
    finished = folder.summaries()
    if not finished:
        expected = folder.summary("*").relative_to(folder.path)
        raise FileNotFoundError(f"{run} holds no finished run ({expected})")
    summary = json.loads(finished[-1].read_text())
    spec, generation = summary["run_spec"], int(summary["final"]["generation"])
    if not asynchronous_settings(spec):
        raise ValueError(f"{run} is not an asynchronous run: there is no log to replay")
    state = replay(spec, read_completions(folder.completions), generations=generation)
    write_run_archive(output, state, evaluations=int(summary["final"]["evaluations"]))
    same = Path(output).read_bytes() == folder.archive.read_bytes()
    log(
        f"{run_label(spec)}: replayed {generation} generations from {folder.completions} "
        f"-> {output}: {'bitwise identical to' if same else 'DIFFERENT from'} "
        f"{folder.archive}"
    )
    return same
