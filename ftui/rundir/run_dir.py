"""One run directory as one object: create it, save its config, add it to the run index,
take its job lock. The operations layer (ftui.ops) and the launcher (ftui.jobs.launch) go
through it, so a run directory is made, recorded and locked the same way whoever starts the
job (``ftui train``, the launch form, a resume from the app).

It sits under the config and the data modules (it imports neither): a new run's directory,
made from a RunConfig and its datasets' fingerprint, is ftui.jobs.launch.create_run. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftui.rundir.paths import CONFIG_FILE, EVENTS_FILE, STOP_FILE
from ftui.rundir.index import record_run
from ftui.rundir.lock import RunBusy, lock_run_dir  # noqa: F401 (RunBusy: callers catch it from here)


@dataclass(frozen=True)
class RunDir:
    """A run directory ftui made (or one given by the user that ftui resolved)."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def events_path(self) -> Path:
        return self.path / EVENTS_FILE

    def events_size(self) -> int:
        """Where a follower of the next job starts reading (0 when there are no events yet)."""
        return self.events_path.stat().st_size if self.events_path.exists() else 0

    def save_config(self, cfg: Any) -> None:
        """The run's config.yaml: what every later reader (resume, chat, eval, export) reads."""
        cfg.save(self.config_path, include_unsupported=False)

    def index(self) -> None:
        """Adds the run to the user's run index (best effort; nothing for the default root)."""
        record_run(self.path)

    def clear_stop(self) -> None:
        """Forgets the previous job's Stop request (a new job of this run starts clean)."""
        (self.path / STOP_FILE).unlink(missing_ok=True)

    def lock(self, wait_s: float = 2.0, clear_stop: bool = True) -> int:
        """Takes the run directory's job lock and returns its descriptor (RunBusy if a job
        holds it): ftui.rundir.lock.lock_run_dir, where the rules are."""
        return lock_run_dir(self.path, wait_s=wait_s, clear_stop=clear_stop)
