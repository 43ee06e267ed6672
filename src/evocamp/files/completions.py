"""The completion log of an asynchronous run (``completions.jsonl``).

Asynchronous mode tells every evaluation as soon as it finishes, so no checkpoint
lies between two tells. Every completion (evaluation id, worker slot, the solution
and its results) is appended to this log, flushed, *before* it is told: a kill loses
at most the evaluations still in flight, and a resume reads the completions logged
after the last kept checkpoint back instead of evaluating them again
(:mod:`evocamp.loop.asynchronous`). A finished run can be told again from its log
alone (``evocamp replay``).

One JSON object per line. Numbers are JSON numbers: Python writes a float64 as the
shortest text that reads back as the same float64, so results are bit-exact. A kill
during an append leaves at most one partial last line, which is dropped (and cut off
before the next append); any other unreadable line is a corrupt log and named as
such. The file is flushed after every line (a killed process loses nothing written)
and fsynced when closed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evocamp.base.errors import CorruptFileError
from evocamp.base.files import NO_SPACE, disk_full_error


@dataclass
class Completion:
    """One finished evaluation of an asynchronous run.

    Attributes
    ----------
    evaluation : int
        Its id: proposals are numbered 0, 1, 2, ... in the order they are made.
    slot : int
        The worker slot that ran it.
    solution : numpy.ndarray
        The evaluated solution.
    objective : float
        Its objective.
    measures : numpy.ndarray
        Its measures (empty without measures).
    extra : dict of str to float
        Its extra fields.
    eval_seconds : float
        Seconds the evaluation took (a timing, not part of the results).
    stats : dict of str to float
        Seconds the worker spent proposing it (``fit_seconds``, ``propose_seconds``;
        decentralised proposals only).
    numerics : dict or None
        The numeric environment of the worker that evaluated it
        (:func:`evocamp.model.numerics.environment`); not logged (``None`` when read
        back: the segment that evaluated it noted its workers' environments).
    status : int
        Its :data:`~evocamp.files.shard.STATUS` (0: evaluated; a failed evaluation's
        values are NaN), logged only when not 0.
    message : str
        A failed evaluation's message (logged with its status).
    attempts : int
        Times it was evaluated (``on_failure: retry``: 1 + its retries), logged only
        when not 1.
    failed_seconds : float
        Seconds its failed attempts took (a timing), logged only when not 0.
    ahead : tuple or None
        ``(solutions, stats)`` of its slot's queued proposal, made by its worker while
        it evaluated (asynchronous proposals ahead); not logged (a resumed run makes it
        again, the same).
    """

    evaluation: int
    slot: int
    solution: np.ndarray
    objective: float
    measures: np.ndarray
    extra: dict = field(default_factory=dict)
    eval_seconds: float = 0.0
    stats: dict = field(default_factory=dict)
    numerics: dict | None = None
    status: int = 0
    message: str = ""
    attempts: int = 1
    failed_seconds: float = 0.0
    ahead: tuple | None = None

    def to_json(self) -> str:
        """The log line (without its newline)."""
        status = {"status": int(self.status), "message": self.message} if self.status else {}
        if self.attempts != 1:
            status["attempts"] = int(self.attempts)
        if self.failed_seconds:
            status["failed_seconds"] = float(self.failed_seconds)
        return json.dumps(
            {
                **status,
                "evaluation": int(self.evaluation),
                "slot": int(self.slot),
                "solution": [float(v) for v in np.ravel(self.solution)],
                "objective": float(self.objective),
                "measures": [float(v) for v in np.ravel(self.measures)],
                "extra": {name: float(v) for name, v in sorted(self.extra.items())},
                "eval_seconds": float(self.eval_seconds),
                "stats": {name: float(v) for name, v in sorted(self.stats.items())},
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, line: str) -> Completion:
        """A completion from its log line."""
        record = json.loads(line)
        return cls(
            evaluation=int(record["evaluation"]),
            slot=int(record["slot"]),
            solution=np.asarray(record["solution"], dtype=np.float64),
            objective=float(record["objective"]),
            measures=np.asarray(record["measures"], dtype=np.float64),
            extra={name: float(v) for name, v in record["extra"].items()},
            eval_seconds=float(record["eval_seconds"]),
            stats={name: float(v) for name, v in record["stats"].items()},
            status=int(record.get("status", 0)),
            message=str(record.get("message", "")),
            attempts=int(record.get("attempts", 1)),
            failed_seconds=float(record.get("failed_seconds", 0.0)),
        )


def read_lines(path: str | Path, *, what: str) -> list[str]:
    """The complete lines of an append-only log (none when the file does not exist):
    the part after the last newline (a kill during an append) is left out.

    Raises
    ------
    CorruptFileError
        When the file is not text (the message names ``what`` and the file).
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode()
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as error:
        raise CorruptFileError(f"{what} {path} is not text ({error})") from None
    return text.split("\n")[:-1]  # the part after the last newline is partial or empty


def read_completions(path: str | Path) -> list[Completion]:
    """The completions logged in ``path``, in the order they were logged (none when
    the file does not exist); a partial last line (a kill during an append) is left
    out.

    Raises
    ------
    CorruptFileError
        When a complete line cannot be read (the message names file and line).
    """
    completions = []
    for number, line in enumerate(read_lines(path, what="completion log"), start=1):
        try:
            completions.append(Completion.from_json(line))
        except (ValueError, KeyError, TypeError) as error:
            raise CorruptFileError(
                f"completion log {path}, line {number}: not a completion ({error}); "
                "the lines before it are intact: cut the file before this line to resume "
                "from them"
            ) from None
    return completions


class LineLog:
    """An append-only log of text lines, each flushed before the call returns (and
    fsynced too when appended with ``sync``).

    Opening cuts off a partial last line left by a kill. Use as a context manager
    (the file is fsynced and closed at the end).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab+")  # noqa: SIM115 - closed in close()
        self._cut_partial_line()

    def _cut_partial_line(self) -> None:
        self._file.seek(0, os.SEEK_END)
        size = self._file.tell()
        if size == 0:
            return
        self._file.seek(0)
        data = self._file.read()
        complete = data.rfind(b"\n") + 1
        if complete != size:
            self._file.truncate(complete)
        self._file.seek(0, os.SEEK_END)

    def clear(self) -> None:
        """Remove every line (the log starts again)."""
        self._file.truncate(0)
        self._file.seek(0)

    def append_line(self, line: str, *, sync: bool = False) -> None:
        """Append one line (without its newline) and flush it to the operating system
        (it survives a kill of this process from here on; with ``sync``, fsynced: a
        crash of the machine too, and every line before it)."""
        try:
            self._file.write(line.encode() + b"\n")
            self._file.flush()
            if sync:
                os.fsync(self._file.fileno())
        except OSError as error:
            if error.errno in NO_SPACE:
                raise disk_full_error(self.path, error) from None
            raise

    def close(self) -> None:
        """fsync and close the log."""
        if self._file.closed:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CompletionLog(LineLog):
    """Append completions to a run's log, each flushed before the call returns.

    Opening cuts off a partial last line left by a kill. Use as a context manager
    (the file is fsynced and closed at the end).
    """

    def append(self, completion: Completion) -> None:
        """Append one completion and flush it to the operating system (it survives a
        kill of this process from here on)."""
        self.append_line(completion.to_json())
