"""The pipeline's step commands: what each Snakemake job of the generation loop does.

Each function is one ``python -m evocamp <step>`` (:mod:`evocamp.cli` parses the
arguments); every one can be run by hand. Messages go to standard error, which the
rules send to the job's log; per-generation progress lines also go to standard output
(Snakemake's terminal).
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from evocamp.base.files import atomic_write_text
from evocamp.executors.housekeeping import fold_logs, prune_work_files
from evocamp.files.archive import write_final_archive
from evocamp.files.checkpoint import open_batch, read_state, write_state
from evocamp.files.completions import read_completions
from evocamp.files.evaluations import (
    EvaluationSettings,
    as_ranges,
    concatenate,
    gather_states,
    missing_generations,
    read_evaluations,
    record_evaluations,
)
from evocamp.files.shard import read_shard, write_shard
from evocamp.loop.asynchronous import asynchronous_settings, initialise_asynchronous, replay
from evocamp.loop.engine import initialise, optimizer_result, tell
from evocamp.loop.evaluation import evaluate_shard
from evocamp.loop.fold import note_numerics
from evocamp.loop.progress import generation_line
from evocamp.loop.state_cache import forget_run, keep_whole, read_full_state, write_told_state
from evocamp.model.layout import KEEP_LOG, METRICS_SEGMENT, WORK_STATE, RunFolder
from evocamp.model.metrics import merge_history, write_rows
from evocamp.model.runspec import run_label
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
    write_state(output, state)
    log(
        f"{run_label(spec)}: initialised; batch of {len(state.next_seeds)} solutions "
        f"for generation 1 -> {output}"
    )


def evaluate_step(*, state: str | Path, shard: int, shards: int, output: str | Path) -> None:
    """Evaluate one shard of the batch stored in a checkpoint (reading only its slice)."""
    with open_batch(state) as (spec, generation, batch, seeds, numerics):
        result = evaluate_shard(
            spec, batch=batch, seeds=seeds, generation=generation, shard=shard, shards=shards
        )
    # A warning in this shard's log when it runs under another kernel than the run so far
    # (the tell notes the shard's environment in the run's records).
    note_numerics(spec, numerics, step="evaluate", generation=generation)
    write_shard(output, result)
    log(
        f"generation {result.generation} shard {shard}/{shards}: solutions "
        f"{result.start}..{result.stop - 1} evaluated in {result.eval_seconds.sum():.3f} s"
    )


def tell_step(
    *,
    state: str | Path,
    shard_files: list[str],
    output: str | Path,
    total: int | None,
    evaluations: EvaluationSettings | None = None,
) -> None:
    """Fold a generation's shards into the archive and write the next state (light,
    with the full state in the node-local cache, between kept generations); the
    generation's evaluations, when kept (``evaluations``, default: the defaults), go
    into that state file."""
    before = read_full_state(state)
    record = (evaluations or EvaluationSettings()).for_run(
        before.spec, batch_size=len(before.next_seeds), total=total
    )
    told = tell(before, [read_shard(path) for path in shard_files], record=record)
    written = write_told_state(output, told, told_from=state, shard_files=shard_files, total=total)
    log(f"generation {told.generation}: {written}")
    progress(generation_line(told, total=total))


def keep_step(
    *, state: str | Path, checkpoint: str | Path, segment: str | Path, logs: str | Path
) -> None:
    """Keep a checkpoint (every K-th generation), save its metrics segment, delete the
    working files of the generations it covers and fold their job logs."""
    kept = read_state(state, with_optimizer=False)
    keep_whole(state, checkpoint)
    # Before the metrics segment (the rule's output): a kill in between reruns this step.
    record_window(
        work=Path(state).parent,
        record=RunFolder.holding(checkpoint).evaluation_segment(kept.generation),
        spec=kept.spec,
        up_to=kept.generation,
    )
    write_rows(segment, kept.metrics_window)
    log(f"generation {kept.generation}: kept {checkpoint}")
    own_log = Path(logs) / KEEP_LOG.name(kept.generation)
    tidy_window(work=Path(state).parent, logs=logs, up_to=kept.generation, own_log=own_log)


def record_window(*, work: Path, record: Path, spec: dict, up_to: int) -> None:
    """Record the evaluations stored in a window's working states (generations
    ``<= up_to``) in ``record``; nothing when the run does not keep them."""
    rows = gather_states(WORK_STATE.in_folder(work), spec=spec, up_to=up_to)
    if rows is not None:
        record_evaluations(record, rows, spec=spec, up_to=up_to)
        log(f"generation {up_to}: {len(rows)} evaluations recorded in {record}")


def finalise_evaluations(*, run: Path, work: Path, spec: dict, generation: int) -> None:
    """Merge a run's evaluation segments and its last window into ``evaluations.h5``,
    then remove the segments (recorded first, removed after: a kill in between
    merges them again, keyed by generation)."""
    folder = RunFolder(run)
    segments = folder.evaluation_segment_files()
    blocks = [read_evaluations(path, spec=spec) for path in segments]
    blocks.append(gather_states(WORK_STATE.in_folder(work), spec=spec, up_to=generation))
    path = folder.evaluations
    rows = record_evaluations(path, concatenate(blocks), spec=spec, up_to=generation)
    if rows is not None:
        missing = as_ranges(missing_generations(rows, generation))
        note = f" (none of generation(s) {missing}: not kept then)" if missing else ""
        log(f"generation {generation}: {len(rows)} evaluations in {path}{note}")
    for segment in segments:
        segment.unlink()
    with contextlib.suppress(OSError):
        folder.evaluation_segments.rmdir()


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
    segments: str | Path,
    metrics: str | Path,
    archive: str | Path,
    summary: str | Path,
    work: str | Path,
    logs: str | Path,
) -> None:
    """Write the final archive and metrics.csv of a run and keep its last checkpoint."""
    final_state = read_full_state(state)
    if Path(state).resolve() != Path(checkpoint).resolve():
        keep_whole(state, checkpoint, state=final_state)
    rows = merge_history(
        METRICS_SEGMENT.in_folder(segments),
        final_state.metrics_window,
        up_to=final_state.generation,
    )
    write_rows(metrics, rows)
    write_run_archive(archive, final_state, evaluations=int(rows["evaluations"][-1]))
    finalise_evaluations(
        run=Path(archive).parent,
        work=Path(work),
        spec=final_state.spec,
        generation=final_state.generation,
    )
    final = {name: rows[-1][name].item() for name in rows.dtype.names}
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
