"""``report_to``: the step and eval figures mirrored to TensorBoard and Weights & Biases.

events.jsonl stays the run's record; the mirrors get each ``step`` and ``eval`` event's
numbers (loss, learning rate, gradient norm, tokens/s, MFU, eval loss, a stage's own
figures...) under transformers' tag names (``train/loss``, ``train/learning_rate``,
``eval/loss``), so runs compare with LLaMA-Factory's in either tool. They run on rank 0, in
the process that writes the events (``EventWriter.mirrors``): the figures are already on the
host there, and a logging step costs one more small append (TensorBoard) or a queued message
(W&B's own service process does the I/O). A mirror that fails is switched off with a
warning; the run goes on.

TensorBoard's event files are written here, not through ``tensorboard``'s package, which is
not needed to write them: records of TensorBoard's ``Event`` protobuf (wall time, step, and
scalar values), framed as TFRecords (length, data and their masked CRC-32C checksums), in
RUN_DIR/tensorboard/events.out.tfevents.*: ``tensorboard --logdir RUN_DIR`` reads them.
"""

from __future__ import annotations

import math
import os
import re
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from ftui.config import RunConfig, reporter_names
from ftui.events import EventWriter
from ftui.paths import TENSORBOARD_DIR

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


# --- TensorBoard's file format: protobuf fields by hand, TFRecord framing, CRC-32C

def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 values as protobuf writes them
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _length_delimited(field: int, data: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def tf_event(wall_time: float, step: int = 0, file_version: str | None = None, values: dict[str, float] | None = None) -> bytes:
    """One serialized ``tensorflow.Event``: wall_time (1, double), step (2, int64),
    file_version (3, string) or summary (5) with one ``Summary.Value`` per tag: tag (1,
    string) and simple_value (2, float)."""
    out = b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint(step)
    if file_version is not None:
        out += _length_delimited(3, file_version.encode())
    if values:
        summary = b"".join(_length_delimited(1, _length_delimited(1, tag.encode()) + b"\x15" + struct.pack("<f", value))
                           for tag, value in values.items())
        out += _length_delimited(5, summary)
    return out


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # Castagnoli's polynomial, reflected
        table.append(c)
    return table


CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def tf_record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + masked_crc(length) + data + masked_crc(data)


class TensorBoardEvents:
    """An event file in RUN_DIR/tensorboard (a new one per process: a resumed run adds one)."""

    name = "tensorboard"

    def __init__(self, folder: Path):
        folder.mkdir(exist_ok=True)
        self.path = folder / f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.0"
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._append(tf_event(time.time(), file_version="brain.Event:2"))

    def _append(self, event: bytes) -> None:
        if self._fd is not None:
            os.write(self._fd, tf_record(event))  # one small unbuffered append, like the event line

    def scalars(self, step: int, values: dict[str, float], wall_time: float) -> None:
        self._append(tf_event(wall_time, step, values=values))

    def close(self, failed: bool) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
                self.warn(f"report_to {sink.name} failed and is off for the rest of this run ({type(err).__name__}: {err}); "
                          "events.jsonl has every figure")

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
                print(f"[ftui] report_to {sink.name} could not be closed: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
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
            reporters.warn(f"report_to {name} could not start and is off for this run ({type(err).__name__}: {err}); "
                           + ("set WANDB_MODE=offline where there is no network; " if name == "wandb" else "")
                           + "events.jsonl has every figure")
    writer.mirrors.append(reporters)
    return reporters
