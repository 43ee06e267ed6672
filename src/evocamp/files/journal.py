"""A shard's journal (``work/gen_<g>/shard_<s>.h5.journal``): its finished calls.

The shard step writes its shard file when its last evaluation ends; until then every
finished call of the evaluation function (one solution, or a chunk) is appended to
this journal as it finishes (flushed; fsynced too when it took
:data:`SYNC_SECONDS` or more), so a shard job killed, cancelled, requeued or timed
out loses only the calls in flight: its rerun reads the journal and
evaluates only the calls that are missing (:func:`evocamp.loop.evaluation.evaluate_slice`).
The journal is removed once the shard file is written.

One JSON object per line, written like the completion log's
(:class:`~evocamp.files.completions.LineLog`: a partial last line left by a kill is
dropped). The first line is the journal's key (run, generation, shard, shards and the
batch's identity): a journal whose key differs (another run, generation or batch in
the same place) is not read but started again. Every other line is one call's outcome;
floats are hexadecimal (``float.hex``: exact, NaN included), so the shard file a rerun
writes holds bitwise the values an undisturbed shard computes, and the seconds the
calls really took.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from pathlib import Path

import numpy as np

from evocamp.base.errors import CorruptFileError
from evocamp.files.completions import LineLog, read_lines

#: What a journal's name adds to its shard file's.
JOURNAL_SUFFIX = ".journal"
#: Seconds from which a call's record is fsynced, not only flushed: an fsync costs
#: 0.1 ms on a local disk and milliseconds on a shared filesystem, a lot beside a
#: cheap call and nothing beside the calls a journal is for. A flushed record
#: survives any kill of the shard's process (a cancel, a time limit, a requeue); only
#: a crash of the machine can lose the cheap calls since the last fsync.
SYNC_SECONDS = 1.0


def journal_path(shard_file: str | Path) -> Path:
    """The journal of the shard file ``shard_file`` (beside it)."""
    shard_file = Path(shard_file)
    return shard_file.with_name(shard_file.name + JOURNAL_SUFFIX)


def journal_key(spec: dict, generation: int, shard: int, shards: int, *, solutions, seeds) -> dict:
    """What a shard's journalled calls belong to: the run (a digest of its spec),
    generation, shard, shards and the batch's identity (a digest of the shard's
    solutions and evaluation seeds)."""
    batch = hashlib.sha256(np.ascontiguousarray(solutions, dtype=np.float64).tobytes())
    batch.update(np.ascontiguousarray(seeds, dtype=np.uint64).tobytes())
    return {
        "run": hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest(),
        "generation": int(generation),
        "shard": int(shard),
        "shards": int(shards),
        "batch": batch.hexdigest(),
    }


def _hex(values) -> list[str]:
    return [float(v).hex() for v in np.ravel(np.asarray(values, dtype=np.float64))]


def _floats(hexes: list[str], shape) -> np.ndarray:
    return np.array([float.fromhex(v) for v in hexes], dtype=np.float64).reshape(shape)


def _encode(call: int, outcome: dict) -> str:
    outputs = outcome["outputs"]
    record = {
        "call": int(call),
        "size": int(outcome["size"]),
        "seconds": float(outcome["seconds"]).hex(),
        "status": int(outcome["status"]),
        "message": outcome["message"],
        "attempts": int(outcome["attempts"]),
        "failed_seconds": float(outcome["failed_seconds"]).hex(),
        "outputs": None
        if outputs is None
        else {
            name: [list(np.shape(values)), _hex(values)] for name, values in sorted(outputs.items())
        },
        "failed_rows": None
        if outcome["failed_rows"] is None
        else {str(k): v for k, v in outcome["failed_rows"].items()},
    }
    return json.dumps(record, separators=(",", ":"))


def _decode(line: str) -> tuple[int, dict]:
    record = json.loads(line)
    outputs = record["outputs"]
    rows = record["failed_rows"]
    return int(record["call"]), {
        "outputs": None
        if outputs is None
        else {name: _floats(hexes, shape) for name, (shape, hexes) in outputs.items()},
        "seconds": float.fromhex(record["seconds"]),
        "size": int(record["size"]),
        "status": int(record["status"]),
        "message": str(record["message"]),
        "attempts": int(record["attempts"]),
        "failed_seconds": float.fromhex(record["failed_seconds"]),
        "failed_rows": None if rows is None else {int(k): v for k, v in rows.items()},
    }


class ShardJournal:
    """The journal of one shard, opened for a rerun and appended to.

    Opening reads what a previous attempt journalled (:attr:`finished`, by call
    index) when its key is ``key``; a journal of another key starts again with
    ``key``. A shard's first attempt (no journal yet) opens its line log
    (:class:`~evocamp.files.completions.LineLog`) when its first call is journalled,
    not before: a shard killed before any call finished leaves no journal. Use as a
    context manager (:meth:`close` at the end).

    Parameters
    ----------
    path : str or pathlib.Path
        The journal (:func:`journal_path` of the shard file).
    key : dict
        What the journalled calls belong to (JSON values): run, generation, shard,
        shards, the batch's identity.

    Raises
    ------
    CorruptFileError
        When a complete line after a matching key cannot be read (the message names
        the file and the line).
    """

    def __init__(self, path: str | Path, *, key: dict) -> None:
        self.path = Path(path)
        self._header = json.dumps({"journal": key}, sort_keys=True, separators=(",", ":"))
        self._log: LineLog | None = None
        #: The outcome of each call a previous attempt journalled, by its index.
        self.finished: dict[int, dict] = {}
        if not self.path.exists():  # a first attempt: nothing to read or start again
            return
        lines = read_lines(self.path, what="shard journal")
        if lines and lines[0] == self._header:
            for number, line in enumerate(lines[1:], start=2):
                try:
                    call, outcome = _decode(line)
                except (ValueError, KeyError, TypeError) as error:
                    raise CorruptFileError(
                        f"shard journal {self.path}, line {number}: not a finished call "
                        f"({error}); remove the file to evaluate the shard again"
                    ) from None
                self.finished[call] = outcome
            self._log = LineLog(self.path)  # cuts off a torn last line
            return
        self._started_again()

    def _started_again(self) -> LineLog:
        """The line log, emptied and holding this journal's key line only."""
        self._log = LineLog(self.path)
        self._log.clear()
        self._log.append_line(self._header, sync=True)
        return self._log

    def append(self, call: int, outcome) -> None:
        """Journal call ``call``'s outcome (a dataclass with the fields ``outputs``,
        ``seconds``, ``size``, ``status``, ``message``, ``attempts``,
        ``failed_seconds``, ``failed_rows``: the keys of :attr:`finished`), flushed
        before this returns (a kill of the process loses nothing) and fsynced when the
        call took :data:`SYNC_SECONDS` or more (a crash of the machine loses none of
        the calls up to it)."""
        log = self._log if self._log is not None else self._started_again()
        record = {f.name: getattr(outcome, f.name) for f in fields(outcome)}
        spent = record["seconds"] + record["failed_seconds"]
        log.append_line(_encode(call, record), sync=spent >= SYNC_SECONDS)

    def close(self) -> None:
        """fsync and close the journal (nothing to do when no call was journalled)."""
        if self._log is not None:
            self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def remove_journal(shard_file: str | Path) -> None:
    """Remove the journal of ``shard_file`` (once the shard file is written)."""
    journal_path(shard_file).unlink(missing_ok=True)
