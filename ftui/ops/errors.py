"""The operations' refusals: one type per refusal, each carrying the message that says what
happened and what to do, and the notices said before it (a front end shows those first).

``failed`` tells a refusal of the request (a run that is live, a checkpoint that does not fit:
``ftui``'s exit 2) from the machine failing it (a directory that cannot be created: exit 1).
"""

from __future__ import annotations

from ftui.ops.notices import Notice


class OpError(Exception):
    """An operation that did not happen; nothing it refused was changed."""

    failed = False  # True: the system failed the request (exit 1), not the request itself (exit 2)

    def __init__(self, message: str, notices: list[Notice] | None = None):
        super().__init__(message)
        self.message = message
        self.notices: list[Notice] = list(notices or [])


class RunNotFound(OpError):
    """The run reference names no run (resolve_run's words)."""


class RunIsLive(OpError):
    """A job runs in the run: resuming or deleting it waits until it is stopped."""


class RunUnreadable(OpError):
    """The run's files cannot be read: what ended it is unknown."""


class NothingToResume(OpError):
    """A completed run without a checkpoint, or asked to resume with nothing changed."""


class RunLocked(OpError):
    """Another job holds the run directory's lock."""


class LockFailed(OpError):
    """The run directory's lock file cannot be opened."""


class WeightsInUse(OpError):
    """A predict / eval / export job reads the weights a resume would replace."""


class ConfigRefused(OpError):
    """The run's config (with the changes asked for) is not valid here."""


class CheckpointRefused(OpError):
    """The checkpoint asked for is not there, or is damaged."""


class CheckpointUnreadable(OpError):
    """The checkpoint's trainer state cannot be read."""


class CheckpointMismatch(OpError):
    """The checkpoint cannot load with the settings asked for."""


class ChangesNeedConsent(OpError):
    """The resume would continue with another base model or other data: it goes on only when
    the user allows it (``--allow-changed``; the app's confirmation). ``changes`` lists them."""

    def __init__(self, message: str, changes: list[str], notices: list[Notice] | None = None):
        super().__init__(message, notices)
        self.changes = changes


class WriteFailed(OpError):
    """The accepted resume's config or fingerprint could not be written (nothing started)."""


class RunDirNotCreated(OpError):
    """The run directory could not be created."""

    failed = True


class StartFailed(OpError):
    """The job's processes could not be started."""

    failed = True


class SlurmRefused(OpError):
    """The run could not be submitted to Slurm (no sbatch, Slurm refused the job, the run
    directory is not on a filesystem the nodes share): the run directory made for it is gone."""


class NotAJoinTarget(OpError):
    """A node joins the run directory node 0 made, and this is not one."""


class NodeRankRefused(OpError):
    """The node rank does not fit the run (below 0, or beyond its nodes)."""


class SourceRefused(OpError):
    """The model a job or a chat would load is not there (no final/, no such checkpoint)."""


class JobRefused(OpError):
    """A predict / eval / export job that cannot be prepared as asked."""


class JobNotPrepared(OpError):
    """The job's directory could not be written."""

    failed = True


class DeleteRefused(OpError):
    """The run must not or cannot be deleted (delete_run's words)."""

    failed = True


class StopFailed(OpError):
    """The job could not be asked to stop (a Slurm run: scancel missing, or Slurm refused)."""

    failed = True
