"""One exception family for everything Sluice reports to its users.

Every error that is the user's to fix says *what* is wrong and *where*: the operator it
concerns and, when known, the line of the user's code that created that operator.
"""

from __future__ import annotations


class SluiceError(Exception):
    """Base of every error Sluice raises on purpose."""


class ConfigError(SluiceError):
    """A setting has a bad value (name and value are in the message)."""


class PipelineError(SluiceError):
    """The dataflow is malformed: a cycle, an unknown column, a type mismatch, misuse of the API.

    ``operator`` names the operator and ``location`` the user's source line that made it.
    """

    def __init__(self, message: str, operator: str | None = None, location: str | None = None):
        self.operator = operator
        self.location = location
        where = ""
        if operator:
            where += f" [operator {operator!r}"
            where += f" defined at {location}]" if location else "]"
        super().__init__(message + where)


class SchemaError(PipelineError):
    """A column is missing or has the wrong type."""


class CycleError(PipelineError):
    """The job graph has a cycle."""


class ModelError(SluiceError):
    """A performance/cost model is missing, malformed, non-monotone or asked out of range."""


class PlanError(SluiceError):
    """A planner cannot produce a plan for its inputs (e.g. infeasible constraints)."""


class StateError(SluiceError):
    """The key-group store cannot give the state asked for."""


class StateCorruptionError(StateError):
    """A state file failed its checksum: it is reported, never silently read."""


class SourceError(SluiceError):
    """A source is misconfigured or its input cannot be read."""


class SinkError(SluiceError):
    """A sink is misconfigured or cannot be written."""


class EnvironmentProblem(SluiceError):
    """The machine lacks something Sluice needs (Java 17+, a service), with how to fix it."""


def from_traceback(text: str, path: str | None = None) -> SluiceError | None:
    """The Sluice error a traceback's text ends in, rebuilt with its class, or None.

    An error raised in a Spark task (or in ``foreachBatch``) reaches the driver as Spark's
    exception, holding the Python traceback only as text, whose last line of ours reads
    ``sluice.errors.<Class>: <message>``. Rebuilding the class lets callers catch, say, a
    ``StateCorruptionError`` raised on an executor as what it is. ``path``: where a write
    the disk refused went, when the text does not say (``storage_problem``)."""
    import re

    found = None
    for match in re.finditer(r"sluice\.errors\.(\w+): ?(.*)", text):
        cls = globals().get(match.group(1))
        if isinstance(cls, type) and issubclass(cls, SluiceError):
            found = (cls, match.group(2).strip())
    if found is None:
        return storage_problem(None, text, path)  # e.g. Spark's own log writes on a full disk
    cls, message = found
    return cls(message)  # the message already names the operator and location, if any


class DeadLetterBudgetExceeded(SluiceError):
    """An operator sent more of a batch to dead letters than the budget allows (a bug, not
    bad data): the job stops before committing the batch."""


class PipelineChangedError(SluiceError):
    """The pipeline changed in a way its checkpoint's state cannot follow (the message
    names each operator, what changed and the way out); nothing was run."""


class CheckpointError(SluiceError):
    """A file of the checkpoint is damaged (the message names it and the way out), or the
    checkpoint cannot be written (disk full, read-only)."""


STORAGE_ERRNOS = frozenset({28, 30, 122, 13})  # ENOSPC, EROFS, EDQUOT, EACCES
_STORAGE_TEXT = ("No space left on device", "Read-only file system", "Disk quota exceeded")


def storage_problem(error: BaseException | None, text: str = "", path: str | None = None) -> CheckpointError | None:
    """The clear error for a write the disk refused (full, read-only, over quota), from the
    OSError itself or, for one raised in Spark's JVM, from its text; None for anything else.
    ``path``: the file being written, when the caller knows it better than the error."""
    if isinstance(error, OSError) and error.errno in STORAGE_ERRNOS:
        where = f" {path or error.filename}" if path or error.filename else ""
        why = error.strerror or str(error)
    else:
        found = next((t for t in _STORAGE_TEXT if t in text), None)
        if found is None:
            return None
        written = _spark_write_target(text) or path
        where, why = f" {written}" if written else "", found
    return CheckpointError(
        f"cannot write{where}: {why}. The job stopped; its last committed batch is intact. Free space "
        f"(or make the checkpoint writable) and run it again: it resumes after that batch, exactly once."
    )


def _spark_write_target(text: str) -> str | None:
    """The directory a failed Spark write job names (a files sink's batch), if any."""
    import re

    match = re.search(r"while writing rows to (\S+?)\.?(?:\s|$)", text)
    return match.group(1).removeprefix("file:") if match else None
