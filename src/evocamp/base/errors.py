"""Every error evocamp reports to a user: one base class, one module.

Each error carries one message that names what is wrong and where (key, run,
generation, shard, solution index); the command line prints it as one line,
``evocamp: error: <message>``, after ``details`` (e.g. the traceback of a user's
function), which go to the job's log. Every class survives pickling, so an error
raised in a Dask worker arrives in the segment job whole.
"""

from __future__ import annotations


class EvocampError(Exception):
    """An error with a message for the user and optional ``details`` for the log.

    Parameters
    ----------
    message : str
        What is wrong and where, on one line (continuation lines are allowed for
        lists of problems).
    details : str
        More text for the log before the message, e.g. a traceback.
    """

    def __init__(self, message: str, *, details: str = "") -> None:
        super().__init__(message)
        self.details = details

    def __reduce__(self):
        # Keeps ``details`` (a keyword argument) across pickling, e.g. from a Dask worker.
        return (_rebuild, (type(self), str(self), self.details))


def _rebuild(cls: type, message: str, details: str) -> EvocampError:
    return cls(message, details=details)


class ConfigError(EvocampError):
    """A campaign configuration is invalid; the message names the key (or the file,
    line and column of a YAML syntax error)."""


class EvaluationError(EvocampError):
    """A user evaluation raised or returned bad values; the message names the run,
    generation, shard and solution."""


class ProgramCrashed(EvaluationError):
    """A ``type: command`` domain's program exited with a non-zero status or was killed
    by a signal: a crash of the evaluation (``on_failure: retry`` evaluates it again),
    not a result it gave."""


class OptimizerError(EvocampError):
    """An optimizer class cannot be imported, lacks a method, raised, or returned a
    bad batch; the message names the class, the method, the run and the generation."""


class CorruptFileError(EvocampError):
    """A checkpoint, shard or archive file cannot be read back (or a state cannot be
    rebuilt); the message names the file and what to delete."""


class DiskFullError(EvocampError):
    """A file could not be written for lack of space (or quota); the message names the
    file, says that nothing already written was lost, and how to continue."""
