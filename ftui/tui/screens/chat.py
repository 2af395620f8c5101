"""Chat with a run's model: pick final/ or a checkpoint (or any model path), stream answers,
and compare with the base model side by side.

The models live in chat worker processes (``ftui.jobs.chat_client.ChatWorker``): loading and
reading replies happen in thread workers, which hand results to the UI thread with
``call_from_thread``. Everything a model writes is shown as plain ``Text``, never parsed as
markup, so ``[bold]`` or ``[/]`` in an answer prints literally, and its control characters show
as escapes (``ftui.safety.text``): an escape sequence in an answer is never obeyed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Input, Label, Select, Static

from ftui.jobs.chat_client import ChatWorker, Conversation, GenerationSettings
from ftui.machine.gpu import device_choices, inventory_read
from ftui.i18n import N_, _
from ftui.safety.text import visible
from ftui.rundir.checkpoints import checkpoints
from ftui.rundir.paths import FINAL_DIR
from ftui.tui.footer import FittingFooter
from ftui.tui.relabel import offer, relabel, relabel_options, word
from ftui.tui.screens.chat_image import ImageField
from ftui.tui.screens.chat_pane import ChatPane
from ftui.tui.ui_thread import to_ui

BASE = "base"
# Esc asks the worker to stop; one still busy after this long (a 100k-character prompt is
# tokenized and prefilled before the first token, where no stop is read) is ended and reloaded.
STOP_GRACE_S = 2.0


# A source select's one choice until a worker has listed the run's checkpoints (compose must not
# touch the disk: a run on a hung network mount would freeze the app)
PENDING = ""
READING_SOURCES = N_("reading the run's checkpoints...")


def read_sources(run_dir: Path) -> tuple[bool, list[int]]:
    """What a run has to load, read from its directory (call it from a worker): whether it has
    final/, and its complete checkpoints' steps, newest first."""
    return (run_dir / FINAL_DIR).is_dir(), [step for step, _path in reversed(checkpoints(run_dir))]


def source_choices(found: tuple[bool, list[int]] | None, base: bool = True) -> list[tuple[str, str]]:
    """(label, value) choices for what ``read_sources`` found, in the current language: final/
    first, then the checkpoints newest first, then the base (unless ``base`` is False); before
    it has been read (``found`` None), the one pending choice."""
    if found is None:
        return [(_(READING_SOURCES), PENDING)]
    has_final, steps = found
    out = [("final/", "final")] if has_final else []
    out += [(_("checkpoint step {step}").format(step=s), f"step-{s}") for s in steps]
    if base:
        out.append((_("base model (untrained)"), BASE))
    return out


# The chat screen's words that a language switch relabels in place: (selector, placeholder or label)
PLACEHOLDERS = {"#chat-model": N_("model directory (or ftui-demo)"), "#chat-system": N_("system prompt (optional)"),
                "#chat-prompt": N_("ask something; Enter sends, Esc stops the answer")}
LABELS = {"#chat-label-temperature": N_("temp"), "#chat-label-top-p": N_("top-p"), "#chat-label-max": N_("max")}


class ChatScreen(Screen):
    BINDINGS = [
        Binding("escape", "stop_or_back", N_("Stop / Back")),
        Binding("ctrl+l", "clear", N_("Clear")),
        Binding("ctrl+s", "save", N_("Save JSON")),
        Binding("ctrl+b", "compare", N_("Compare with base")),
        Binding("ctrl+o", "reload", N_("Load")),
    ]
    # Keys that leave a narrow footer first (80 columns): Stop / Back and Quit stay.
    FOOTER_DROP_FIRST = ("compare", "reload", "clear", "save")

    def __init__(self, run_dir: Path | None = None, worker_factory=ChatWorker):
        super().__init__()
        self.run_dir = Path(run_dir) if run_dir else None
        self.worker_factory = worker_factory
        self.workers_by_pane: dict[str, Any] = {}
        self.conversations: dict[str, Conversation] = {}
        self.busy: set[str] = set()
        self.compare = False
        self.specs: dict[str, dict[str, Any]] = {}  # what each pane loaded, to reload after a forced stop
        self.loading_panes: set[str] = set()  # panes whose model is loading
        self.queued: dict[str, tuple[str, dict[str, list[str]]]] = {}  # pane -> a prompt (and its files) typed while its model loaded
        self.stop_asked: dict[str, float] = {}  # pane -> when Esc asked it to stop
        self.found: tuple[bool, list[int]] | None = None  # the run's final/ and checkpoints, once a worker has read them
        # Every worker process this screen started, until closed: loads finish in threads,
        # possibly after the screen is gone, and those workers must end too.
        self._started: set[Any] = set()
        self._lock = threading.Lock()
        self._closed = False

    def compose(self) -> ComposeResult:
        sources = source_choices(self.found) if self.run_dir else []
        # cuda:N is the Nth GPU CUDA_VISIBLE_DEVICES leaves; NVML only once read (else a worker fills them in)
        devices = [("CPU", "cpu"), *(device_choices() if inventory_read() else [])]
        with Horizontal(id="chat-controls"):
            if sources:
                yield Select(sources, value=sources[0][1], allow_blank=False, id="chat-source")
            else:
                yield Input(placeholder=word(PLACEHOLDERS, "#chat-model"), id="chat-model")
            yield Select(devices, value="cpu", allow_blank=False, id="chat-device")  # a training run may hold the GPUs
            yield Label(word(LABELS, "#chat-label-temperature"), classes="chat-label", id="chat-label-temperature")
            yield Input("0.7", id="chat-temperature", classes="chat-num")
            yield Label(word(LABELS, "#chat-label-top-p"), classes="chat-label", id="chat-label-top-p")
            yield Input("0.9", id="chat-top-p", classes="chat-num")
            yield Label(word(LABELS, "#chat-label-max"), classes="chat-label", id="chat-label-max")
            yield Input("256", id="chat-max", classes="chat-num")
        yield Input(placeholder=word(PLACEHOLDERS, "#chat-system"), id="chat-system")
        with Horizontal(id="chat-panes"):
            yield ChatPane(N_("model"), id="pane-main")
        yield Static("", id="chat-status")
        yield ImageField(id="chat-image")
        yield Input(placeholder=word(PLACEHOLDERS, "#chat-prompt"), id="chat-prompt")
        yield FittingFooter(self.FOOTER_DROP_FIRST)

    def on_mount(self) -> None:
        self.query_one("#chat-prompt", Input).focus()
        if not inventory_read():
            self.find_devices()
        if self.run_dir is not None:
            self.loading_panes.add("main")  # a prompt typed before the sources are read waits for the model too
            self.find_sources(self.run_dir)

    @work(thread=True, group="sources")
    def find_sources(self, run_dir: Path) -> None:
        """The run's final/ and checkpoints, listed off the UI thread; the first is loaded."""
        found = read_sources(run_dir)
        self._call_ui(self._offer_sources, found)

    def _offer_sources(self, found: tuple[bool, list[int]]) -> None:
        if self._closed:
            return
        self.found = found
        offer(self.query_one("#chat-source", Select), source_choices(found))
        self.load_pane("main", self._source_spec())

    @work(thread=True, exclusive=True, group="devices")
    def find_devices(self) -> None:
        """The GPUs to offer, read through NVML off the UI thread."""
        choices = device_choices()
        if choices:
            to_ui(self, self._offer_devices, choices)

    def _offer_devices(self, choices: list[tuple[str, str]]) -> None:
        select = self.query_one("#chat-device", Select)
        chosen = select.value
        select.set_options([("CPU", "cpu"), *choices])
        select.value = chosen if chosen in {v for _label, v in choices} else "cpu"

    async def recompose(self) -> None:
        """The language changed: the screen's own words are relabelled in place, so the
        conversation, what is typed, the chosen source and the model workers all stay."""
        relabel(self, {**PLACEHOLDERS, **LABELS})
        self.query_one(ImageField).retranslate()
        for pane in self.query(ChatPane):
            if pane.model_label is None:
                pane.border_title = _(pane.default_title)
        if self.run_dir is not None:
            # its Changed reloads nothing: the spec is the one loaded
            relabel_options(self.query_one("#chat-source", Select), source_choices(self.found))
        self.query_one(FittingFooter).retranslate()

    # --- Settings and sources

    def settings(self) -> GenerationSettings:
        def num(widget_id: str, cast, default):
            try:
                return cast(self.query_one(widget_id, Input).value)
            except ValueError:
                return default

        return GenerationSettings(
            temperature=max(0.0, num("#chat-temperature", float, 0.7)), top_p=min(1.0, max(0.01, num("#chat-top-p", float, 0.9))),
            max_new_tokens=max(1, num("#chat-max", int, 256)), system=self.query_one("#chat-system", Input).value,
        )

    def _device(self) -> str:
        return str(self.query_one("#chat-device", Select).value)

    def _source_spec(self) -> dict[str, Any]:
        """What to load, read on the UI thread (the loading worker gets a plain dict)."""
        device = self._device()
        if self.run_dir is not None:
            value = str(self.query_one("#chat-source", Select).value)
            if value == BASE:
                return {"run": str(self.run_dir), "base": True, "device": device}
            return {"run": str(self.run_dir), "checkpoint": value, "device": device}
        return {"model": self.query_one("#chat-model", Input).value.strip(), "device": device}

    def _status(self, text: str, style: str = "dim") -> None:
        self.query_one("#chat-status", Static).update(Text(visible(text), style=style))

    # --- Loading (a worker process per pane)

    def load_pane(self, pane: str, spec: dict[str, Any]) -> None:
        """Loads ``spec`` into ``pane``'s worker (marked loading at once, on the UI thread, so a
        prompt typed from now on waits for it instead of being thrown away)."""
        self.loading_panes.add(pane)
        self._load_in_worker(pane, spec)

    @work(thread=True, group="chat-load")
    def _load_in_worker(self, pane: str, spec: dict[str, Any]) -> None:
        self._call_ui(self._status, _("loading the model…"))
        self.specs[pane] = spec
        old = self.workers_by_pane.pop(pane, None)
        if old is not None:
            self._close_worker(old)
        worker = self._start_worker()
        if worker is None:
            return  # the screen closed meanwhile
        reply = worker.load(**spec)
        with self._lock:
            closed = self._closed
            if not closed and reply["type"] == "loaded":
                self.workers_by_pane[pane] = worker
        if closed or reply["type"] != "loaded":
            self._close_worker(worker)
            if not closed:
                self._call_ui(self._loaded, pane, None, reply.get("message", _("cannot load the model")))
            return
        self._call_ui(self._loaded, pane, reply, None)

    def _start_worker(self) -> Any:
        """A new worker process, registered so that closing the screen ends it; None once closed."""
        with self._lock:
            if self._closed:
                return None
            worker = self.worker_factory()
            self._started.add(worker)
            return worker

    def _close_worker(self, worker: Any) -> None:
        worker.close()
        with self._lock:
            self._started.discard(worker)

    def _call_ui(self, fn, *args: Any) -> None:
        """call_from_thread, dropped once the screen is closed (its widgets are gone)."""
        if not self._closed:
            to_ui(self, fn, *args)

    def _loaded(self, pane: str, reply: dict[str, Any] | None, error: str | None) -> None:
        if self._closed:
            return
        self.loading_panes.discard(pane)
        if pane == "base" and not self.compare:  # compare was turned off while it loaded
            worker = self.workers_by_pane.pop(pane, None)
            if worker is not None:
                self._close_in_background(worker)
            return
        widget = self.query_one(f"#pane-{pane}", ChatPane)
        queued = self.queued.pop(pane, None)
        if error:
            if queued is not None:
                widget.finish(_("not sent: the model could not be loaded"))
            widget.show_error(error)
            self._status(error, "red")
            return
        # Text, not str: a str title is parsed as markup, and a run directory may be named "exp[/]old"
        widget.model_label = str(reply["label"])
        widget.border_title = Text(visible(widget.model_label, one_line=True))
        self.conversations[pane] = Conversation()
        self._status(_("{model} on {device} ({params} parameters)").format(
            model=reply["label"], device=reply["device"], params=f"{reply['params']:,}"))
        if reply.get("note"):  # a GPU run loaded on a machine without one: said once
            self.notify(reply["note"])
        if queued is not None and pane in self.workers_by_pane:
            self.ask(pane, self.workers_by_pane[pane], queued[0], shown=True, media=queued[1])

    def action_reload(self) -> None:
        if self.run_dir is not None and self.found is None:
            return  # the run's sources are being read: the first is loaded then
        self.load_pane("main", self._source_spec())

    def on_select_changed(self, event: Select.Changed) -> None:
        if (event.select.id == "chat-source" and self.is_mounted and "main" in self.workers_by_pane
                and self._source_spec() != self.specs.get("main")):  # a relabelling (language switch) keeps the source
            self.load_pane("main", self._source_spec())

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "chat-model":
            self.load_pane("main", self._source_spec())
        elif event.input.id == "chat-prompt":
            text = event.value.strip()
            if not text:
                return
            if self.busy:
                self.notify(_("an answer is still streaming; Esc stops it"), severity="warning")
                return
            if self.queued:
                self.notify(_("a prompt is already waiting for the model to load"), severity="warning")
                return
            if not self.workers_by_pane and not self.loading_panes:
                self.notify(_("no model is loaded: choose one and press Ctrl+O (or Enter in the model field)"), severity="warning")
                return
            event.input.value = ""
            media = self.query_one(ImageField).take()  # the attached images and videos go with this message
            for pane in sorted(self.loading_panes):  # sent when its model has loaded
                self.queued[pane] = (text, media)
                self.query_one(f"#pane-{pane}", ChatPane).add_user(text, waiting=True, media=media)
            for pane, worker in list(self.workers_by_pane.items()):
                if pane not in self.loading_panes:
                    self.ask(pane, worker, text, media=media)

    # --- Asking and streaming

    def ask(self, pane: str, worker: Any, text: str, shown: bool = False, media: dict[str, list[str]] | None = None) -> None:
        """Sends ``text`` (with ``media``: its images and videos) to ``pane``'s model (``shown``:
        its turn is on screen already, queued)."""
        conv = self.conversations.setdefault(pane, Conversation())
        media = media or {}
        if not shown:
            self.query_one(f"#pane-{pane}", ChatPane).add_user(text, media=media)
        self.busy.add(pane)
        self.stream(pane, worker, conv.ask(text, media.get("images"), media.get("videos")), self.settings())

    @work(thread=True, group="chat-stream")
    def stream(self, pane: str, worker: Any, messages: list[dict[str, str]], settings: GenerationSettings) -> None:
        """The answer's replies, decoded by ftui.jobs.chat_reply (as the CLI's REPL decodes them)."""
        from ftui.jobs.chat_reply import Failed, Token, decode_reply

        rid = worker.generate(messages, settings)
        pending: list[str] = []
        last = time.monotonic()
        killed = False
        while True:
            asked = self.stop_asked.get(pane)
            if not killed and asked is not None and time.monotonic() - asked > STOP_GRACE_S:
                worker.kill()  # its reader then reports an exit, which ends this loop
                killed = True
            reply = worker.get(timeout=0.05)
            part = None if reply is None else decode_reply(reply, rid)
            if reply is not None and part is None:
                continue  # another answer's reply
            if isinstance(part, Token):
                pending.append(part.text)
            now = time.monotonic()
            if pending and (part is None or now - last > 0.05):  # batch tokens: at most ~20 redraws/s
                self._call_ui(self._tokens, pane, "".join(pending))
                pending, last = [], now
            if part is None or isinstance(part, Token):
                continue
            if pending:
                self._call_ui(self._tokens, pane, "".join(pending))
            self._call_ui(self._finished, pane, part, killed and isinstance(part, Failed) and part.exited)
            return

    def _tokens(self, pane: str, text: str) -> None:
        if self._closed:
            return
        self.query_one(f"#pane-{pane}", ChatPane).add_tokens(text)

    def _finished(self, pane: str, part: Any, killed: bool = False) -> None:
        """The answer ended: ``part`` is its Done or Failed (ftui.jobs.chat_reply); ``killed``:
        its worker was ended after a stop it could not read."""
        from ftui.jobs.chat_reply import Done

        if self._closed:
            return
        self.busy.discard(pane)
        self.stop_asked.pop(pane, None)
        widget = self.query_one(f"#pane-{pane}", ChatPane)
        conv = self.conversations[pane]
        if killed:
            conv.messages.pop()
            widget.finish(_("stopped (the model was still reading the prompt, so its worker was ended; reloading it)"))
            self.load_pane(pane, self.specs[pane])
        elif isinstance(part, Done):
            note = _("{tokens} tokens · {rate} tokens/s").format(tokens=part.tokens, rate=f"{part.rate:.1f}")
            note += " · " + _("stopped") if part.stopped else ""
            conv.answer(widget.finish(note))
        else:
            conv.messages.pop()  # the question stays on screen, not in the history sent next time
            widget.show_error(part.message)

    # --- Actions

    def action_stop_or_back(self) -> None:
        if self.busy:
            for pane in self.busy:
                # a thread: the stream's thread may be writing a long prompt into a full pipe
                threading.Thread(target=self.workers_by_pane[pane].stop, daemon=True).start()
                self.stop_asked.setdefault(pane, time.monotonic())
            return
        self.app.pop_screen()

    def action_clear(self) -> None:
        for pane, conv in self.conversations.items():
            conv.clear()
            self.query_one(f"#pane-{pane}", ChatPane).clear_turns()

    def action_save(self) -> None:
        folder = self.run_dir or Path.cwd()
        path = folder / f"chat-{time.strftime('%Y%m%d-%H%M%S')}.json"
        conv = self.conversations.get("main")
        if conv is None or not conv.messages:
            self.notify(_("nothing to save yet"), severity="warning")
            return
        label = self.query_one("#pane-main", ChatPane).model_label or ""
        base = self.conversations.get("base") if self.compare else None
        compared = None
        if base is not None:  # a comparison is saved whole: both sides, one file
            compared = {"model": self.query_one("#pane-base", ChatPane).model_label or "",
                        "messages": list(base.messages)}
        saved = Conversation(list(conv.messages))  # as it stands now: an answer may still be streaming into it
        self.save_conversation(saved, path, self.settings(), str(label), compared)

    @work(thread=True, group="io")
    def save_conversation(self, conv: Conversation, path: Path, settings: GenerationSettings, label: str,
                          compared: dict[str, Any] | None) -> None:
        """The file is written off the UI thread (the run's directory may be on a slow mount);
        notify is thread-safe."""
        try:
            conv.save(str(path), settings, label, compared_with=compared)
        except OSError as err:
            self.notify(_("cannot save: {error}").format(error=err), severity="error", markup=False)
            return
        self.notify(_("saved {path}").format(path=path), markup=False)

    def action_compare(self) -> None:
        """Side by side: the same prompts to the base model (a second worker)."""
        if self.run_dir is None:
            self.notify(_("compare needs a run (its base model)"), severity="warning")
            return
        panes = self.query_one("#chat-panes", Horizontal)
        if self.compare:
            self.compare = False
            worker = self.workers_by_pane.pop("base", None)
            if worker is not None:
                self._close_in_background(worker)
            self.conversations.pop("base", None)
            self.loading_panes.discard("base")
            self.queued.pop("base", None)
            self.query_one("#pane-base").remove()
            return
        self.compare = True
        panes.mount(ChatPane(N_("base model"), id="pane-base"))
        self.load_pane("base", {"run": str(self.run_dir), "base": True, "device": self._device()})

    def _close_in_background(self, worker: Any) -> None:
        threading.Thread(target=self._close_worker, args=(worker,), daemon=True).start()  # the UI thread never waits on a process

    def on_unmount(self) -> None:
        """Ends every worker this screen started: loaded, still loading or still starting
        (a load that finishes later sees ``_closed`` and ends its own)."""
        with self._lock:
            self._closed = True
            workers = list(self._started)
            self.workers_by_pane.clear()
        for worker in workers:
            self._close_in_background(worker)
