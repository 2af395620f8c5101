"""Starting a serve job (``ftui serve``, the Serve screen): the model checked, the job prepared
in a directory of its own (``ftui.jobs.serve_job``) and started detached, as every job is;
each refusal is one of the operations' errors."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftui.i18n import _
from ftui.ops import errors
from ftui.ops.jobs import JobStarted, source_problem

if TYPE_CHECKING:
    from ftui.config.schema import RunConfig


def start_serve(*, run_dir: Path | None, checkpoint: str | None = None, base: bool = False, model: str | None = None,
                adapter: str | None = None, model_config: RunConfig | None = None, root: Path | None = None,
                served_name: str | None = None, adapters: list[tuple[str, str]] | tuple = (), host: str = "127.0.0.1",
                port: int = 8000, api_key_file: str | None = None, queue_size: int = 8, max_tokens_limit: int = 4096,
                max_body_bytes: int = 1 << 20, device: str = "auto", generation: dict[str, Any] | None = None,
                max_batch: int = 8) -> JobStarted:
    """A serve job of a run (its final/, a checkpoint or its base) or of a model outside any
    run (``model`` with ``model_config``, the job under ``root``): checked, prepared, started."""
    from ftui.config.problems import ConfigError
    from ftui.jobs import offline, serve_job
    from ftui.rundir.run_dir import RunBusy

    problem = source_problem(run_dir, checkpoint=checkpoint, base=base, model=model, adapter=adapter)
    if problem:
        raise errors.SourceRefused(problem)
    source = offline.source_of(run_dir, checkpoint, base, model, adapter)
    try:
        job_dir, cfg = serve_job.prepare_serve_job(
            run_dir=run_dir, source=source, model_config=model_config, root=root, served_name=served_name, adapters=adapters,
            host=host, port=port, api_key_file=api_key_file, queue_size=queue_size, max_tokens_limit=max_tokens_limit,
            max_body_bytes=max_body_bytes, device=device, generation=generation, max_batch=max_batch)
    except (serve_job.ServeJobError, offline.JobError, ConfigError) as e:
        raise errors.JobRefused(str(e)) from None
    except OSError as e:
        raise errors.JobNotPrepared(str(e)) from None
    try:
        info = offline.start_job("serve", job_dir, cfg)  # looked up at the call: a test may stand a fake in
    except RunBusy as e:
        raise errors.RunLocked(str(e)) from None
    except OSError as e:
        raise errors.StartFailed(_("cannot start the job in {path}: {reason}").format(path=job_dir, reason=e)) from e
    return JobStarted("serve", job_dir, info)
