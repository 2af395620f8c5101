"""The rollout browser: a grpo or ppo run's completions as the runner wrote them to its
rollouts file (``ftui.rundir.rollouts``), newest step first; ``s`` sorts by step or by reward
(highest or lowest first), ``/`` searches prompt and completion (``step:N`` or ``step:N-M``
keeps those steps), the highlighted rollout is shown whole below: its prompt, reference,
completion, per-function rewards, advantage, length and whether it was cut. A live run's new
rollouts come in as they are written (the file polled in a worker, as the dashboard tails
its events). Opened from the dashboard and the runs screen (key g) and ``ftui rollouts RUN``.

Every text here is a model's or a dataset's: shown through rich Text, never markup, control
characters as escapes (``visible``), each cut at DETAIL_CAP characters with a note.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.widgets import DataTable, Input

from ftui.i18n import N_, _
from ftui.rundir.rollout_query import SORT_WORDS, SORTS, rollout_key, select
from ftui.rundir.rollouts import MAX_ROWS as MAX_KEPT, RolloutTail
from ftui.safety.text import visible
from ftui.tui.predictions import clip
from ftui.tui.screens.predictions import ExamplesScreen, MAX_ROWS
from ftui.tui.screens.runs import keep_tail
from ftui.tui.ui_thread import to_ui

POLL_S = 1.0  # a live run's new rollouts show within a second or two
DETAIL_CAP = 20_000  # characters of each text the detail shows (a 100 KB completion: its start, and a note)
N_("completion"), N_("reward"), N_("adv"), N_("len")  # column headings, translated where shown


def prompt_cell(prompt: str, width: int) -> Text:
    """A prompt's end on one line: a rendered chat prompt starts with the same system turn in
    every row and ends with what tells the rows apart (the question, the assistant's header)."""
    return Text(keep_tail(visible(prompt.rstrip()[-2 * width:], one_line=True), width))


@dataclass
class Rollout:
    index: int  # its place in the order read (the table's row key)
    row: dict[str, Any]  # ftui.rundir.rollouts.valid_row's fields


def number_cell(value: float | None, fmt: str = "{:.2f}", style: str = "") -> Text:
    if value is None:
        return Text("-", style="dim", justify="right")
    return Text(fmt.format(value), style=style, justify="right")


def literal(text: str, cap: int = DETAIL_CAP) -> Text:
    """``text`` as it is (escapes visible), its first ``cap`` characters and a note past them."""
    out = Text(visible(text[:cap]))
    if len(text) > cap:
        out.append("\n" + _("… {count:,} more characters not shown here (ftui rollouts RUN --json prints them whole)").format(
            count=len(text) - cap), style="dim italic")
    return out


class RolloutsScreen(ExamplesScreen):
    """step | reward | adv | len | prompt | completion, the highlighted rollout whole below."""

    TEXT_COLUMNS = ("prompt", "completion")
    SCORE_COLUMNS = ("reward", "adv", "len")
    SORTS = SORTS
    INDEX_HEADING, INDEX_WIDTH = N_("step"), 6
    SEARCH_HINT = N_("search prompt, completion; step:N or step:N-M (/)")

    def __init__(self, run_dir: Path, follow: bool = True, query: str = "", sort: str = "newest"):
        super().__init__()
        self.run_dir = Path(run_dir)
        self.follow = follow
        self.tail = RolloutTail(self.run_dir)
        self.places: dict[tuple[int, int, int, int], int] = {}  # a rollout's place in items (a resume writes it again)
        self.initial_query = query
        self.sort_index = SORTS.index(sort) if sort in SORTS else 0

    def on_mount(self) -> None:
        self.query_one("#ex-search", Input).value = self.initial_query
        self.set_columns()
        self.query_one("#ex-table").focus()
        self.show_title()
        self.load()
        if self.follow:
            self.set_interval(POLL_S, self.load)

    def heading(self) -> Text:
        return Text(_("rollouts of {run}").format(run=visible(self.run_dir.name, one_line=True)), style="bold")

    def sort_label(self) -> str:
        return _(SORT_WORDS[self.sort_metric])

    def ordered(self, query: str) -> list[Rollout]:
        return [self.items[at] for at in select([r.row for r in self.items], query, self.sort_metric)]

    def index_cell(self, item: Rollout) -> Text:
        return Text(str(item.row["step"]), justify="right")

    @work(thread=True, exclusive=True, group="load")
    def load(self) -> None:
        """The rows written since the last poll (all of them the first time, or after the file
        rotated), read off the UI thread."""
        rows, reset = self.tail.poll()
        if rows or reset:
            to_ui(self, self._add_rows, rows, reset, self.tail.skipped, self.tail.problem)

    def _add_rows(self, rows: list[dict], reset: bool, skipped: int, problem: str | None = None) -> None:
        items = [] if reset else list(self.items)
        if reset:
            self.places = {}
        for row in rows:
            key = rollout_key(row)
            if key in self.places:  # the same rollout written again after a resume: the newer one
                items[self.places[key]] = Rollout(items[self.places[key]].index, row)
            else:
                self.places[key] = len(items)
                items.append(Rollout(items[-1].index + 1 if items else 0, row))
        if len(items) > MAX_KEPT:
            items = items[-MAX_KEPT:]
            self.places = {rollout_key(item.row): at for at, item in enumerate(items)}
        status = Text(_("{count} rollouts").format(count=len(items)) if items else
                      _("no rollouts yet: a grpo or ppo run writes them at each generation"), style="dim")
        if skipped:
            status.append("  " + _("{count} lines skipped (not rollouts)").format(count=skipped), style="yellow")
        if problem:
            status.append("  " + visible(problem, one_line=True), style="red")
        self.fill_keeping_cursor(items, status)

    def fill_keeping_cursor(self, items: list[Rollout], status: Text) -> None:
        """New rows come in without moving the highlight off the rollout being read."""
        table = self.query_one("#ex-table", DataTable)
        row = table.cursor_row
        current = self.visible_items[row].index if 0 <= row < min(len(self.visible_items), MAX_ROWS) else None
        self.show_items(items, status)
        if current is not None:
            for at, item in enumerate(self.visible_items[:MAX_ROWS]):
                if item.index == current:
                    table.move_cursor(row=at)
                    break

    def cells(self, item: Rollout, width: int) -> list[Text]:
        row = item.row
        advantage = row["advantage"]
        return [number_cell(row["reward"]),
                number_cell(advantage, "{:+.2f}", "green" if advantage > 0 else "red" if advantage < 0 else ""),
                Text(f"{row['length']}{'+' if row['truncated'] else ''}", style="yellow" if row["truncated"] else "", justify="right"),
                prompt_cell(row["prompt"], width), Text(clip(row["completion"][: 4 * width], width))]

    def detail(self, item: Rollout) -> Text:
        row = item.row
        text = Text()
        text.append(_("step {step} · generation {generation} · group {group} · sample {sample}").format(
            step=row["step"], generation=row["generation"], group=row["group"], sample=row["sample"]), style="bold")
        text.append("\n" + _("reward") + " ", style="dim")
        text.append("-" if row["reward"] is None else f"{row['reward']:.4f}")
        for name, value in row["rewards"].items():
            text.append(f"  {name} ", style="dim")  # a printable name (the reader checks), never markup: Text
            text.append("-" if value is None else f"{value:.4f}")
        text.append("\n" + _("advantage") + " ", style="dim")
        text.append(f"{row['advantage']:+.4f}")
        text.append("  " + _("length") + " ", style="dim")
        text.append(str(row["length"]))
        if row["truncated"]:
            text.append("  " + _("cut at max_completion_length"), style="yellow")
        if row["cut"]:
            text.append("  " + _("texts cut in the rollouts file"), style="yellow")
        for heading, body in ((_("prompt"), row["prompt"]), (_("reference"), row["reference"]), (_("completion"), row["completion"])):
            text.append(f"\n\n{heading}\n", style="bold")
            text.append_text(literal(body) if body else Text(_("(none)") if body is None else _("(empty)"), style="dim"))
        return text
