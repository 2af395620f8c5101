"""Reading a run's events: new lines of a growing events.jsonl by byte offset, never twice.

Readers skip a torn last line (the writer may be in the middle of it), lines that are not
JSON and unknown kinds (``ftui.rundir.events.well_formed``). Long runs of step lines can be
read as columns (:class:`StepColumns`), which is what lets the dashboard attach to a run
with a million steps in about a second. No torch here.
"""

from __future__ import annotations

import json
import math
import os
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from ftui.rundir.events import extra_figures, START_EVENTS, well_formed
from ftui.rundir.run_files import UnreadableFile, file_size, line_start_after, read_complete_lines


# A step line as EventWriter writes it (compact separators, schema key order). Pulling
# (t, step, loss, lr) out of a run of such lines with one `findall` costs a small fraction of
# json.loads per line, which is what lets the dashboard attach to a run with a million step
# events in about a second. Lines of any other shape take the full parse.
_NUM = rb"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
_STEP_LINE = re.compile(rb'\{"v":1,"t":(' + _NUM + rb'),"event":"step","step":([0-9]{1,15}),"epoch":[^,\n]*,"loss":(null|' + _NUM + rb')(?:,"lr":(null|' + _NUM + rb'))?[,}]')
_OTHER_KIND = re.compile(rb',"event":"(?!step")')


class StepColumns(NamedTuple):
    """Consecutive step events reduced to what the loss and learning-rate curves need
    (``read_new(compact=True)``)."""

    t: array
    step: array
    loss: array  # NaN where the loss was null
    lr: array  # NaN where the learning rate was null or absent


@dataclass
class EventReader:
    """Reads new events from a growing events.jsonl by byte offset, never re-reading the file.

    A line without its newline yet is left for the next call (the writer may be halfway
    through it); a line that is not JSON, or of an unknown kind or version, is skipped.
    """

    path: Path
    offset: int = 0
    skipped: int = 0
    problem: str | None = None  # why the file cannot be read (then read_new returns nothing)
    _pending: bytes = field(default=b"", repr=False)
    _seen_step: bool = field(default=False, repr=False)
    # The first step event read carried extra figures (a preference stage's): StepColumns have
    # no room for them, so this file's step lines all take the full parse (their figures are plotted).
    _steps_have_figures: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    def read_new(self, max_bytes: int | None = None, compact: bool = False) -> list[Any]:
        """New complete events (all there are when ``max_bytes`` is None). With ``compact``,
        runs of step events come as :class:`StepColumns`; the first step event ever seen and
        the last one of the batch still come as full dicts (they carry the figures the
        dashboard shows), and so do all step events of a file whose first step event
        carries extra figures (events.extra_figures: a preference stage's rewards, plotted
        over the run). A file that cannot be read sets ``problem`` and gives nothing."""
        out: list[Any] = []
        while True:
            before = self.offset
            try:
                complete, self.offset, self._pending = read_complete_lines(self.path, self.offset, self._pending, max_bytes)
            except UnreadableFile as err:
                self.problem = str(err)
                return out
            self.problem = None
            if complete is not None:
                out.extend(self._parse_compact(complete) if compact else self._parse(complete.split(b"\n")))
            if max_bytes is not None or self.offset == before:
                return out

    def _parse_compact(self, chunk: bytes) -> list[Any]:
        out: list[Any] = []
        pos = 0
        n_steps = n_other = 0
        for m in _OTHER_KIND.finditer(chunk):
            start = chunk.rfind(b"\n", 0, m.start()) + 1
            if start < pos:
                continue  # a second match inside the same line
            end = chunk.find(b"\n", m.start())
            end = len(chunk) if end < 0 else end
            n_steps += self._step_segment(chunk[pos:start], out)
            out.extend(self._parse((chunk[start:end],)))
            n_other += 1
            pos = end + 1
        n_steps += self._step_segment(chunk[pos:], out)
        if n_steps + n_other != chunk.count(b"\n") + 1:
            # Some line is in neither shape (another writer, another key order): take the
            # exact, slow path for this batch.
            self._seen_step = any(isinstance(e, dict) and e["event"] == "step" for e in out) or self._seen_step
            return list(self._parse(chunk.split(b"\n")))
        return out

    def _step_segment(self, seg: bytes, out: list[Any]) -> int:
        """Appends one segment of step lines: StepColumns, with the first-ever and the last
        step as full events. Returns how many step lines it held."""
        found = _STEP_LINE.findall(seg)
        count = len(found)
        if not found:
            return 0
        if not self._seen_step:
            first_end = seg.find(b"\n")
            first = list(self._parse((seg if first_end < 0 else seg[:first_end],)))
            out.extend(first)
            found = found[1:]
            self._steps_have_figures = any(e["event"] == "step" and extra_figures(e) for e in first)
            seg = b"" if first_end < 0 else seg[first_end + 1:]
        if self._steps_have_figures:
            out.extend(self._parse(seg.split(b"\n")))
            return count
        if len(found) > 1:
            ts, steps, losses, lrs = zip(*found[:-1])
            out.append(StepColumns(
                array("d", map(float, ts)), array("l", map(int, steps)), _floats(losses), _floats(lrs),
            ))
        if found:
            body = seg.rstrip(b"\n")
            out.extend(self._parse((body[body.rfind(b"\n") + 1 :],)))
        return count

    def _parse(self, lines: Iterable[bytes]) -> Iterable[dict[str, Any]]:
        for raw in lines:
            if not raw.strip():
                continue
            try:
                event = json.loads(raw)
            except (ValueError, UnicodeDecodeError, RecursionError):  # a line nested deeper than the stack is not an event either
                self.skipped += 1
                continue
            if not well_formed(event):
                self.skipped += 1
                continue
            if event["event"] == "step":
                self._seen_step = True
            yield event


def _floats(found: Iterable[bytes]) -> array:
    """Numbers pulled by _STEP_LINE as doubles: NaN for null or absent (an empty match)."""
    if b"null" not in found and b"" not in found:  # the usual case, at C speed
        return array("d", map(float, found))
    return array("d", (float(x) if x and x != b"null" else math.nan for x in found))


LIFECYCLE_TAIL = 1 << 20


def last_lifecycle_event(path: Path) -> str | None:
    """The kind of the last start event (run_start, job_start) or run_end in the file's last
    LIFECYCLE_TAIL bytes (None if none is there). run_end is always a job's last record, so
    this says whether the job that wrote the file last has ended, without reading a long
    run's whole history."""
    tail = LIFECYCLE_TAIL
    try:
        size = file_size(path)
        reader = EventReader(path, offset=line_start_after(path, size - tail))
        events = reader.read_new(tail + (64 << 10))
    except UnreadableFile:
        return None
    kinds = [e["event"] for e in events if e["event"] in (*START_EVENTS, "run_end")]
    return kinds[-1] if kinds else None


def read_all(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete, known events of a file (for tests and one-shot readers)."""
    return EventReader(Path(path)).read_new()
