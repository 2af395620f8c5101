"""Starting a training job: a new run, an accepted resume, or node K > 0 joining node 0's
multi-node run. Each returns a Started (what the front end says and follows) or raises the
refusal's own error."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftui.i18n import _
from ftui.ops import errors
from ftui.ops.lookup import find_run
from ftui.ops.notices import Notice, warning
from ftui.ops.resume import PreparedResume, ResumeRequest, prepare_resume, trust_remote_code_warning

if TYPE_CHECKING:
    from ftui.config.schema import RunConfig


@dataclass
class Started:
    """A started training job: its run directory, the config it runs, the checkpoint it
    resumed from (None: a new run), what launch.json records, where its events begin (a
    follower of a resumed run starts there) and ``home``, the directory its own supervisor
    writes (node K's records for a joined node; else the run directory)."""

    run_dir: Path
    cfg: RunConfig
    info: dict[str, Any]
    resumed_from: Path | None = None
    offset: int = 0
    home: Path | None = None
    notices: list[Notice] = field(default_factory=list)

    def other_node_commands(self) -> list[str]:
        """What to run on each other node of a multi-node run (none for one node, and none under
        launcher slurm: Slurm starts every node)."""
        from ftui.jobs.launch import other_node_commands

        if self.cfg.nnodes == 1 or self.cfg.launcher == "slurm":
            return []
        return other_node_commands(self.cfg, self.run_dir, self.resumed_from)


def _launch(run_dir: Path, cfg: RunConfig, resume: Path | None = None, lock: int | None = None) -> dict[str, Any]:
    """launch.start_run, its refusals as the operations' errors. Looked up at each call (a test
    may stand a fake launcher in)."""
    from ftui.jobs import launch
    from ftui.rundir.run_dir import RunBusy

    try:
        return launch.start_run(run_dir, cfg, resume=resume, lock=lock)
    except RunBusy as e:
        raise errors.RunLocked(str(e)) from None


def _submit(run_dir: Path, cfg: RunConfig, resume: Path | None = None) -> tuple[dict[str, Any], list[Notice]]:
    """launcher slurm: ftui.jobs.slurm_submit.submit, its refusal as SlurmRefused, its notices as warnings."""
    from ftui.jobs import slurm_submit

    said: list[str] = []
    try:
        info = slurm_submit.submit(cfg, run_dir, resume, notices=said)
    except slurm_submit.SlurmSubmitError as e:
        raise errors.SlurmRefused(str(e)) from None
    return info, [warning(n) for n in said]


def remove_new_run(run_dir: Path) -> None:
    """The run directory ``start`` just made for a job that did not start, and its run index
    line: nothing half made is left (only what create_run and the submit wrote is in it)."""
    import shutil

    from ftui.rundir.index import forget_run

    forget_run(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)


def start(cfg: RunConfig) -> Started:
    """A new run of a checked config: its directory (ftui.jobs.launch.create_run), then its job
    (launcher slurm: submitted; a refusal removes the directory again)."""
    from ftui.jobs.launch import create_run

    try:
        run = create_run(cfg)
    except OSError as e:
        error = errors.RunDirNotCreated(_("cannot create a run directory under {path}: {reason}").format(path=cfg.output_dir, reason=e))
        raise error from e
    if cfg.launcher == "slurm":
        try:
            info, notices = _submit(run.path, cfg)
        except BaseException:
            remove_new_run(run.path)
            raise
        return Started(run.path, cfg, info, home=run.path, notices=notices)
    try:
        info = _launch(run.path, cfg)
    except OSError as e:
        raise errors.StartFailed(_("cannot start the run in {path}: {reason}").format(path=run.path, reason=e)) from e
    return Started(run.path, cfg, info, home=run.path)


def start_resumed(prepared: PreparedResume) -> Started:
    """The job of an accepted resume (prepare_resume), its lock handed to the supervisor; under
    launcher slurm the lock is released and the job submitted (its node 0 takes the lock)."""
    import os

    from ftui.rundir.run_dir import RunDir

    offset = RunDir(prepared.run_dir).events_size()
    if prepared.cfg.launcher == "slurm":
        os.close(prepared.lock)
        info, notices = _submit(prepared.run_dir, prepared.cfg, prepared.checkpoint)
        return Started(prepared.run_dir, prepared.cfg, info, resumed_from=prepared.checkpoint, offset=offset,
                       home=prepared.run_dir, notices=[*prepared.notices, *notices])
    info = _launch(prepared.run_dir, prepared.cfg, resume=prepared.checkpoint, lock=prepared.lock)
    return Started(prepared.run_dir, prepared.cfg, info, resumed_from=prepared.checkpoint, offset=offset,
                   home=prepared.run_dir, notices=prepared.notices)


def resume(request: ResumeRequest) -> Started:
    """prepare_resume, then its job: what ``ftui train --resume`` and the app's resume key do."""
    return start_resumed(prepare_resume(request))


def join(rank: int, *, config_path: str | None = None, resume_run: str | None = None, checkpoint: str | None = None) -> Started:
    """Node ``rank`` > 0 of a multi-node run joins the run directory node 0 made (on a
    filesystem the nodes share), named by its config.yaml (``config_path``) or, resuming, by
    ``resume_run`` and ``checkpoint``; its ranks write their part of each checkpoint there and
    its supervisor keeps its own records in RUN/nodes/node-K (ftui.jobs.launch.join_target)."""
    from ftui.config.problems import ConfigError
    from ftui.config.load import load_config
    from ftui.jobs.launch import join_target
    from ftui.rundir.paths import EVENTS_FILE
    from ftui.rundir.paths import node_dir
    from ftui.rundir.checkpoints import CheckpointError, resolve_checkpoint
    from ftui.rundir.paths import CONFIG_FILE

    if rank < 0:
        raise errors.NodeRankRefused(_("--node-rank must be 0 or more"))
    resume = None
    if resume_run is not None:
        run_dir = find_run(resume_run)
        try:
            resume = resolve_checkpoint(run_dir, checkpoint)
        except CheckpointError as e:
            raise errors.CheckpointRefused(str(e)) from None
    else:
        found = join_target(config_path) if config_path else None
        if found is None:
            raise errors.NotAJoinTarget(_("--node-rank {rank} joins the run node 0 started: give the config.yaml inside node 0's run "
                                          "directory, as node 0 printed it (ftui train RUN/config.yaml --node-rank {rank}), on a "
                                          "filesystem the nodes share. A run directory of this node's own would hold this node's "
                                          "part of every checkpoint, leaving the run's checkpoints incomplete").format(rank=rank))
        run_dir = found
    try:
        cfg, warnings = load_config(run_dir / CONFIG_FILE)  # checked against this node's GPUs
    except ConfigError as e:
        raise errors.ConfigRefused(str(e)) from None
    if rank >= cfg.nnodes:
        raise errors.NodeRankRefused(_("{run} is a run of {nnodes} node(s): node ranks 1 to {last} join it").format(
            run=run_dir.name, nnodes=cfg.nnodes, last=cfg.nnodes - 1) if cfg.nnodes > 1 else
            _("{run} is a one-node run: no other node joins it").format(run=run_dir.name))
    notices = [warning(w) for w in warnings]
    if cfg.trust_remote_code:
        notices.append(warning(trust_remote_code_warning()))
    cfg = cfg.model_copy(update={"node_rank": rank})
    home = node_dir(run_dir, rank)
    offset = (home / EVENTS_FILE).stat().st_size if (home / EVENTS_FILE).exists() else 0
    try:
        info = _launch(run_dir, cfg, resume=resume)
    except errors.RunLocked as e:
        e.notices = notices
        raise
    except OSError as e:
        raise errors.StartFailed(_("cannot start node {node} in {path}: {reason}").format(node=rank, path=home, reason=e),
                                 notices) from None
    return Started(run_dir, cfg, info, resumed_from=resume, offset=offset, home=home, notices=notices)
