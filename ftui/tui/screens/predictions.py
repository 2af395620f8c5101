"""Browse a predict job's answers, and compare two jobs' answers to the same dataset.

The examples are read and scored (each one's BLEU-4 and ROUGE-L, ``text_metrics``, about
1 ms each) in a thread worker; the table shows them as soon as they are read and gets its
scores when they are done. ``s`` changes the sort (dataset order, then each score worst
first; in the comparison the difference B - A, the examples B lost most on first), ``/``
searches prompt, label and prediction. Every text from the dataset or the model is shown
literally: rich Text, never markup, control characters as escapes (``predictions.visible``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Input, Static
from textual.worker import get_current_worker

from ftui.i18n import N_, _
from ftui.tui.footer import FittingFooter
from ftui.tui.predictions import (SCORES, Example, Pair, clip, metric_deltas, pair_examples, read_predictions, read_results,
                                  score_examples, shown, visible)
from ftui.tui.ui_thread import to_ui

MAX_ROWS = 2000  # table rows at once: a search narrows a larger set
# The table is filled again once typing pauses this long, not on every keystroke: a refill of
# tens of thousands of examples (casefolded, matched, up to MAX_ROWS rows) made typing lag.
SEARCH_DELAY_S = 0.15
SCORE_WIDTH = 8
NAMES = {"bleu-4": "BLEU-4", "rouge-l": "ROUGE-L"}
N_("prompt"), N_("label"), N_("prediction")  # the text columns' headings (TEXT_COLUMNS), translated where shown


def score_cell(value: float | None, signed: bool = False) -> Text:
    if value is None:
        return Text("…", style="dim", justify="right")
    style = ("green" if value > 0 else "red" if value < 0 else "") if signed else ""
    return Text(f"{value:+.1f}" if signed else f"{value:.1f}", style=style, justify="right")


class ExamplesScreen(Screen):
    """What the browser and the comparison share: a search box, a sortable table of items
    (examples or pairs), the highlighted item in full below. Subclasses load the items and
    say how they look."""

    BINDINGS = [
        Binding("s", "sort", N_("Sort")),
        Binding("slash", "search", N_("Search")),
        Binding("escape", "back", N_("Back")),
    ]
    SORTS: tuple[str | None, ...] = (None, *SCORES)
    TEXT_COLUMNS: tuple[str, ...] = ()
    SCORE_COLUMNS: tuple[str, ...] = ()
    INDEX_HEADING, INDEX_WIDTH = "#", 4  # the first column: the item's place (a rollout's step)
    SEARCH_HINT = N_("search prompt, label, prediction (/)")

    def __init__(self) -> None:
        super().__init__()
        self.items: list[Any] = []
        self.visible_items: list[Any] = []
        self.sort_index = 0
        self.status = Text(_("reading..."), style="dim")
        self.problem: str | None = None
        self._search_timer: Timer | None = None  # the refill after the typing pauses

    @property
    def sort_metric(self) -> str | None:
        return self.SORTS[self.sort_index]

    def compose(self) -> ComposeResult:
        yield Static("", id="ex-title")
        yield Input(id="ex-search", placeholder=_(self.SEARCH_HINT), compact=True)
        yield DataTable(id="ex-table", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="ex-detail"):
            yield Static("", id="ex-detail-text")
        yield FittingFooter()

    async def recompose(self) -> None:
        """The language changed: headings, title, placeholder and footer again, in place (the
        examples, their scores, the search and the sort stay)."""
        self.query_one("#ex-search", Input).placeholder = _(self.SEARCH_HINT)
        self._text_width = None
        self.set_columns()
        self.fill_table()
        self.query_one(FittingFooter).retranslate()

    def on_mount(self) -> None:
        self.set_columns()
        self.query_one("#ex-table").focus()
        self.show_title()
        self.load()

    def on_resize(self, _event) -> None:
        if self.set_columns():
            self.fill_table()

    def set_columns(self) -> bool:
        """The text columns share the width the number columns leave; True when they changed."""
        table = self.query_one("#ex-table", DataTable)
        width = (table.size.width or self.app.size.width) - 2
        fixed = self.INDEX_WIDTH + 2 + len(self.SCORE_COLUMNS) * (SCORE_WIDTH + 2)
        text_width = max(8, (width - fixed) // max(1, len(self.TEXT_COLUMNS)) - 2)
        if getattr(self, "_text_width", None) == text_width:
            return False
        self._text_width = text_width
        table.clear(columns=True)
        table.add_column(_(self.INDEX_HEADING), key="index", width=self.INDEX_WIDTH)
        for name in self.SCORE_COLUMNS:
            table.add_column(_(name), key=name, width=SCORE_WIDTH)
        for name in self.TEXT_COLUMNS:
            table.add_column(_(name), key=name, width=text_width)
        return True

    # --- subclass parts
    def load(self) -> None:
        raise NotImplementedError

    def cells(self, item: Any, width: int) -> list[Text]:
        raise NotImplementedError

    def detail(self, item: Any) -> Text:
        raise NotImplementedError

    def heading(self) -> Text:
        raise NotImplementedError

    def show_and_score(self, items: list[Any], examples: list[Example]) -> None:
        """(In the loading worker) shows the items, then scores their examples and shows that."""
        to_ui(self, self.show_items, items, scored_status(0, len(examples)))
        scores = score_all(self, examples)
        if scores is not None:
            to_ui(self, self._scored, examples, scores)

    # --- rendering (UI thread)
    def _scored(self, examples: list[Example], scores: list[dict[str, float]] | str) -> None:
        if isinstance(scores, str):  # the metric packages are missing: the table stays in dataset order
            self.set_status(Text(scores, style="yellow"))
            return
        for example, each in zip(examples, scores):
            example.scores = each
        self.show_items(self.items, scored_status(len(examples), len(examples)))

    def show_items(self, items: list[Any], status: Text) -> None:
        if not self.is_attached:
            return
        self.items, self.status = items, status
        self.fill_table()

    def set_status(self, status: Text) -> None:
        if self.is_attached:
            self.status = status
            self.show_title()

    def fail(self, message: str) -> None:
        self.problem = message
        self.set_status(Text(message, style="red"))

    def show_title(self) -> None:
        text = self.heading()
        shown_line = _("{shown} of {total} shown · sorted by {sort} (s)").format(shown=len(self.visible_items), total=len(self.items),
                                                                              sort=self.sort_label())
        text.append(f"\n{shown_line} · ", style="dim")
        text.append_text(self.status)
        self.query_one("#ex-title", Static).update(text)

    def sort_label(self) -> str:
        return _("dataset order") if self.sort_metric is None else f"{NAMES.get(self.sort_metric, self.sort_metric)} {self.sort_words()}"

    def sort_words(self) -> str:
        return _("worst first")

    def ordered(self, query: str) -> list[Any]:
        """The items the search keeps, in the sort's order."""
        return shown(self.items, query, self.sort_metric)

    def index_cell(self, item: Any) -> Text:
        return Text(str(item.index + 1), justify="right")

    def fill_table(self) -> None:
        table = self.query_one("#ex-table", DataTable)
        query = self.query_one("#ex-search", Input).value
        self.visible_items = self.ordered(query)
        table.clear()
        for item in self.visible_items[:MAX_ROWS]:
            table.add_row(self.index_cell(item), *self.cells(item, self._text_width), key=str(item.index))
        if len(self.visible_items) > MAX_ROWS:
            self.notify(_("showing the first {count} of {total}: search to narrow them").format(
                count=MAX_ROWS, total=len(self.visible_items)), timeout=5)
        self.show_title()
        self.show_detail()

    def show_detail(self) -> None:
        table = self.query_one("#ex-table", DataTable)
        row = table.cursor_row
        item = self.visible_items[row] if 0 <= row < min(len(self.visible_items), MAX_ROWS) else None
        self.query_one("#ex-detail-text", Static).update(self.detail(item) if item is not None else Text())

    @on(DataTable.RowHighlighted, "#ex-table")
    def _highlighted(self, _event) -> None:
        self.show_detail()

    @on(Input.Changed, "#ex-search")
    def _search_changed(self, _event) -> None:
        if self._search_timer is not None:
            self._search_timer.stop()
        self._search_timer = self.set_timer(SEARCH_DELAY_S, self.fill_table)

    @on(Input.Submitted, "#ex-search")
    def _search_done(self, _event) -> None:
        self.query_one("#ex-table").focus()

    # --- actions
    def action_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(self.SORTS)
        self.fill_table()

    def action_search(self) -> None:
        self.query_one("#ex-search").focus()

    def action_back(self) -> None:
        if self.focused is self.query_one("#ex-search"):
            self.query_one("#ex-table").focus()
            return
        self.app.pop_screen()


def section(text: Text, heading: str, body: str, scores: dict[str, float] | None = None) -> None:
    """One block of the detail: a heading (with scores) and the text whole, literally."""
    text.append(heading, style="bold")
    if scores:
        text.append("  " + "  ".join(f"{NAMES.get(k, k)} {scores[k]:.2f}" for k in SCORES if k in scores), style="dim")
    text.append("\n")
    text.append(visible(body) or _("(empty)"), style="" if body else "dim")
    text.append("\n\n")


def scored_status(done: int, total: int) -> Text:
    return Text(_("scoring {done}/{total}...").format(done=done, total=total), style="dim") if done < total else Text(_("scored"), style="dim")


class PredictionsScreen(ExamplesScreen):
    """One predict job's examples: # | BLEU-4 | ROUGE-L | prompt | label | prediction."""

    TEXT_COLUMNS = ("prompt", "label", "prediction")
    SCORE_COLUMNS = ("BLEU-4", "ROUGE-L")

    def __init__(self, job_dir: Path):
        super().__init__()
        self.job_dir = Path(job_dir)
        self.label = self.job_dir.name

    def heading(self) -> Text:
        return Text(_("predictions of {job}").format(job=self.label), style="bold")

    @work(thread=True, exclusive=True, group="load")
    def load(self) -> None:
        from ftui.jobs.offline import read_job_spec

        self.label = str(read_job_spec(self.job_dir).get("source_label") or self.job_dir.name) + f" · {self.job_dir.name}"
        try:
            rows = read_predictions(self.job_dir)
        except (OSError, ValueError) as err:
            to_ui(self, self.fail, _("cannot read the predictions: {error}").format(error=err))
            return
        self.show_and_score(rows, rows)

    def cells(self, item: Example, width: int) -> list[Text]:
        return [score_cell(item.scores.get("bleu-4")), score_cell(item.scores.get("rouge-l")),
                Text(clip(item.prompt, width)), Text(clip(item.label, width)), Text(clip(item.predict, width))]

    def detail(self, item: Example) -> Text:
        text = Text()
        section(text, f"#{item.index + 1} " + _("prompt"), item.prompt)
        section(text, _("label"), item.label)
        section(text, _("prediction"), item.predict, item.scores)
        return text


def score_all(screen: ExamplesScreen, rows: list[Example]) -> list[dict[str, float]] | str | None:
    """Each row's scores, computed on copies in the calling worker (the UI thread assigns them);
    a string when the metric packages are missing; None when the screen was left."""
    from ftui.data.text_metrics import metrics_unavailable

    missing = metrics_unavailable()
    if missing:
        return _("no per-example scores: {missing}").format(missing=missing)
    worker = get_current_worker()
    copies = [Example(r.index, r.prompt, r.predict, r.label) for r in rows]
    done = score_examples(copies, cancelled=lambda: worker.is_cancelled,
                          progress=lambda n: to_ui(screen, screen.set_status, scored_status(n, len(rows))))
    return [c.scores for c in copies] if done else None


class CompareScreen(ExamplesScreen):
    """Two predict jobs of one dataset: their figures and B - A, then per example
    # | Δ BLEU-4 | Δ ROUGE-L | label | A | B (each with its BLEU-4), sortable by the difference."""

    TEXT_COLUMNS = ("label", "A", "B")
    SCORE_COLUMNS = ("ΔBLEU-4", "ΔROUGE-L")

    def __init__(self, job_a: Path, job_b: Path):
        super().__init__()
        self.jobs = (Path(job_a), Path(job_b))
        self.labels = (self.jobs[0].name, self.jobs[1].name)
        self.deltas: list[tuple[str, float | None, float | None, float | None]] = []

    def sort_words(self) -> str:
        return _("B - A, B's losses first")

    def heading(self) -> Text:
        text = Text("A ", style="bold")
        text.append(self.labels[0])
        text.append("  " + _("vs") + "  B ", style="bold")
        text.append(self.labels[1])
        for name, a, b, d in self.deltas:
            text.append(f"\n{NAMES.get(name, name.upper()):<8}", style="dim")
            text.append(f"A {_fmt(a)}  B {_fmt(b)}  ")
            text.append(f"Δ {_fmt(d, signed=True)}", style="green" if d and d > 0 else "red" if d and d < 0 else "")
        return text

    @work(thread=True, exclusive=True, group="load")
    def load(self) -> None:
        from ftui.jobs.offline import read_job_spec

        specs = [read_job_spec(j) for j in self.jobs]
        self.labels = tuple(f"{s.get('source_label') or j.name} · {j.name}" for s, j in zip(specs, self.jobs))
        if specs[0].get("dataset") != specs[1].get("dataset"):
            to_ui(self, self.fail, _("not the same dataset: A has {a}, B has {b}; compare two jobs of one dataset").format(
                a=repr(specs[0].get("dataset")), b=repr(specs[1].get("dataset"))))
            return
        try:
            a, b = read_predictions(self.jobs[0]), read_predictions(self.jobs[1])
        except (OSError, ValueError) as err:
            to_ui(self, self.fail, _("cannot read the predictions: {error}").format(error=err))
            return
        pairs, mismatched = pair_examples(a, b)
        self.deltas = metric_deltas(read_results(self.jobs[0], "predict"), read_results(self.jobs[1], "predict"))
        if mismatched:
            to_ui(self, self.fail, _("{count} of {total} examples have different labels in A and B: "
                                                   "not the same examples (different data or max samples)").format(
                count=mismatched, total=len(pairs)))
            return
        self.show_and_score(pairs, [p.a for p in pairs] + [p.b for p in pairs])

    def cells(self, item: Pair, width: int) -> list[Text]:
        return [score_cell(item.delta("bleu-4"), signed=True), score_cell(item.delta("rouge-l"), signed=True),
                Text(clip(item.a.label, width)), scored_text(item.a, width), scored_text(item.b, width)]

    def detail(self, item: Pair) -> Text:
        text = Text()
        section(text, f"#{item.index + 1} " + _("prompt"), item.a.prompt)
        section(text, _("label"), item.a.label)
        section(text, f"A {self.labels[0]}", item.a.predict, item.a.scores)
        section(text, f"B {self.labels[1]}", item.b.predict, item.b.scores)
        return text


def scored_text(example: Example, width: int) -> Text:
    """A prediction's cell in the comparison: its BLEU-4, then the text."""
    bleu = example.scores.get("bleu-4")
    head = "  …  " if bleu is None else f"{bleu:5.1f} "
    text = Text(head, style="dim")
    text.append(clip(example.predict, max(1, width - len(head))))
    return text


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "?"
    return f"{value:+.2f}" if signed else f"{value:.2f}"
