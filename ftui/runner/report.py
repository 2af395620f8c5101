"""``report_to``: the step and eval figures mirrored to TensorBoard and Weights & Biases.

events.jsonl stays the run's record; the mirrors get each ``step`` and ``eval`` event's
numbers (loss, learning rate, gradient norm, tokens/s, MFU, eval loss, a stage's own
figures...) under transformers' tag names (``train/loss``, ``train/learning_rate``,
``eval/loss``), so runs compare with LLaMA-Factory's in either tool. They run on rank 0, in
the process that writes the events (``EventWriter.mirrors``): the figures are already on the
host there, and a logging step costs one more small append (TensorBoard) or a queued message
(W&B's own service process does the I/O). A mirror that fails is switched off with a
warning; the run goes on.

TensorBoard's event files go to RUN_DIR/tensorboard (torch's ``SummaryWriter``, which needs
the ``tensorboard`` package): ``tensorboard --logdir RUN_DIR`` reads them.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from ftui.rundir.event_writer import EventWriter
from ftui.config.schema import RunConfig
from ftui.config.machine_checks import reporter_names
from ftui.i18n import _
from ftui.rundir.paths import TENSORBOARD_DIR

# transformers' names where they differ from the event's field
TAG_NAMES = {"lr": "learning_rate"}
SKIPPED_FIELDS = {"v", "t", "event", "step"}


def scalars_of(event: dict[str, Any]) -> tuple[int, dict[str, float]] | None:
    """(step, {tag: value}) of a step or eval event's finite numbers; None for other kinds."""
    kind = event.get("event")
    if kind not in ("step", "eval") or not isinstance(event.get("step"), int):
        return None
    prefix = "train/" if kind == "step" else "eval/"
    out = {}
    for key, value in event.items():
        if key in SKIPPED_FIELDS or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        name = key.removeprefix("eval_") if kind == "eval" else TAG_NAMES.get(key, key)
        out[prefix + name] = float(value)
    return event["step"], out


class Sink(Protocol):
    name: str

    def scalars(self, step: int, values: dict[str, float], wall_time: float) -> None: ...

    def close(self, failed: bool) -> None: ...


class TensorBoardEvents:
    """Event files in RUN_DIR/tensorboard through torch's ``SummaryWriter`` (the tensorboard
    package; a new file per process, so a resumed run adds one). Its writer thread does the
    file I/O, so a logging step only queues the values."""

    name = "tensorboard"

    def __init__(self, folder: Path):
        from torch.utils.tensorboard import SummaryWriter

        folder.mkdir(exist_ok=True)
        self.writer = SummaryWriter(log_dir=str(folder), flush_secs=10)

    def scalars(self, step: int, values: dict[str, float], wall_time: float) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step, walltime=wall_time)

    def close(self, failed: bool) -> None:
        self.writer.close()  # flushes what is queued


class WandbRun:
    """A W&B run in RUN_DIR/wandb, named and identified by the run directory, so a resumed
    run continues the same W&B run. WANDB_PROJECT names the project (default: ftui);
    WANDB_MODE=offline writes it without network, for ``wandb sync`` later."""

    name = "wandb"

    def __init__(self, cfg: RunConfig, run_dir: Path):
        import wandb

        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or "ftui", name=cfg.run_name or run_dir.name,
                              id=re.sub(r"[^A-Za-z0-9_-]", "-", run_dir.name), resume="allow", dir=str(run_dir),
                              config=cfg.to_dict(include_unsupported=False))

    def scalars(self, step: int, values: dict[str, float], wall_time: float) -> None:
        self.run.log(values, step=step)

    def close(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


class Reporters:
    """The config's mirrors, called by the EventWriter with each event it has written."""

    def __init__(self, writer: EventWriter, sinks: list[Sink]):
        self.writer = writer
        self.sinks = sinks

    def __call__(self, event: dict[str, Any]) -> None:
        found = scalars_of(event)
        if found is None or not found[1]:
            return
        step, values = found
        for sink in list(self.sinks):
            try:
                sink.scalars(step, values, float(event.get("t") or time.time()))
            except Exception as err:  # a mirror never ends the run: events.jsonl has the figures
                self.sinks.remove(sink)
                self.warn(_("report_to {name} failed and is off for the rest of this run ({error}); events.jsonl has every "
                            "figure").format(name=sink.name, error=f"{type(err).__name__}: {err}"))

    def warn(self, message: str) -> None:
        print(f"[ftui] {message}", file=sys.stderr, flush=True)
        try:
            self.writer.write("log", level="warning", message=message)
        except OSError:
            pass  # a full disk ends the run where it matters (the loop's own events)

    def close(self, failed: bool = False) -> None:
        """Flushes and closes each mirror (W&B writes its summary): before run_end, so the
        mirrors are complete when a follower sees the run end."""
        for sink in self.sinks:
            try:
                sink.close(failed)
            except Exception as err:
                print("[ftui] " + _("report_to {name} could not be closed: {error}").format(
                    name=sink.name, error=f"{type(err).__name__}: {err}"), file=sys.stderr, flush=True)
        self.sinks = []


def open_reporters(cfg: RunConfig, run_dir: Path, writer: EventWriter | None) -> Reporters | None:
    """The mirrors report_to names, hooked to ``writer`` (rank 0's; None elsewhere). One that
    cannot start (W&B without network and not offline) is left out with a warning."""
    names = reporter_names(cfg.report_to)
    if writer is None or not names:
        return None
    reporters = Reporters(writer, [])
    for name in names:
        try:
            reporters.sinks.append(TensorBoardEvents(run_dir / TENSORBOARD_DIR) if name == "tensorboard" else WandbRun(cfg, run_dir))
        except Exception as err:
            said = (_("report_to {name} could not start and is off for this run ({error}); set WANDB_MODE=offline where there "
                      "is no network; events.jsonl has every figure") if name == "wandb" else
                    _("report_to {name} could not start and is off for this run ({error}); events.jsonl has every figure"))
            reporters.warn(said.format(name=name, error=f"{type(err).__name__}: {err}"))
    writer.mirrors.append(reporters)
    return reporters
