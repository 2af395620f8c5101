"""The job's process group: which backend, whether one is needed, joining and leaving it."""

from __future__ import annotations

import contextlib
import datetime
import os
from typing import Any, Iterator

import torch
import torch.distributed as dist

from ftui.rundir.rank_env import STORE_ENV, THREADS_DEFAULTED_ENV
from ftui.config.schema import RunConfig
from ftui.runner.engines.base import DistInfo


def cpu_threads(local_world_size: int, env: dict[str, str] | None = None) -> int:
    """Intra-op threads for a rank that computes on the CPU (a CPU run, or an offload preset's
    optimizer step): the user's ``OMP_NUM_THREADS`` when they set it, else the rank's share of
    the cores this process may run on (its CPU affinity: taskset, a cgroup's cpuset).

    The user's number wins because more threads than free cores is ruinous for small ops: each
    parallel region waits for its slowest thread, and a thread that shares its core with another
    busy process is descheduled for whole time slices (the demo's steps took 25x longer on a
    2-core machine with one other busy process). On a shared machine ``OMP_NUM_THREADS=1`` is
    the cure, so it must not be overridden."""
    env = os.environ if env is None else env
    asked = env.get("OMP_NUM_THREADS", "").strip()
    if asked.isdigit() and int(asked) > 0 and not env.get(THREADS_DEFAULTED_ENV):
        return int(asked)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, local_world_size))


def needs_process_group(cfg: RunConfig, info: DistInfo) -> bool:
    """FSDP2's device mesh and DeepSpeed need a process group even for one process."""
    spec = cfg.engine_spec
    return info.world_size > 1 or spec.deepspeed or spec.fsdp


def backend_for(cfg: RunConfig, device: torch.device) -> str:
    """NCCL on CUDA, gloo on CPU. FSDP with CPU offload keeps sharded gradients on the host,
    so its gradient-norm all-reduce runs on CPU tensors: that needs gloo beside NCCL
    (pytorch#148532: "No backend type associated with device type cpu")."""
    if device.type != "cuda":
        return "gloo"
    spec = cfg.engine_spec
    if spec.fsdp and spec.host_optimizer:
        return "cuda:nccl,cpu:gloo"
    return "nccl"


@contextlib.contextmanager
def process_group(cfg: RunConfig, info: DistInfo, device: torch.device) -> Iterator[None]:
    """Joins the job's process group for the duration (see ``backend_for``).

    One process that still needs a group (FSDP's mesh, DeepSpeed) gets one over an
    in-memory store: nothing listens on a socket. Several processes on one node meet
    through the launcher's FileStore (``FTUI_STORE``, a file in the 0700 run directory, see
    ftui.jobs.spawn); several nodes through torchrun's environment. The collective timeout is set past ftui's own
    ``hang_timeout``, so a hung rank is reported by the supervisor, which can name it,
    before the collectives give up."""
    if not needs_process_group(cfg, info):
        yield
        return
    kwargs: dict[str, Any] = {}
    if device.type == "cuda":
        kwargs["device_id"] = device
    if cfg.hang_timeout > 0:
        kwargs["timeout"] = datetime.timedelta(seconds=cfg.hang_timeout + 120)
    store_file = os.environ.get(STORE_ENV)
    if info.world_size == 1:
        kwargs.update(store=dist.HashStore(), rank=0, world_size=1)  # in memory: nothing listens
    elif store_file:  # one node: the launcher's FileStore in the 0700 run directory
        kwargs.update(store=dist.FileStore(store_file, info.world_size), rank=info.rank, world_size=info.world_size)
    dist.init_process_group(backend=backend_for(cfg, device), **kwargs)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def mean_over_ranks(value: torch.Tensor) -> torch.Tensor:
    """The mean of a scalar over every rank (no gradient), or the value itself outside a
    process group. Only where every rank calls it equally often: training micro batches are
    (the sampler pads each rank's share), eval batches are not."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    total = value.detach().clone()
    dist.all_reduce(total)
    return total / dist.get_world_size()
