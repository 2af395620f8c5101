"""Chat: the worker protocol on the demo's trained model, the CLI, and the chat screen."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rich.markup import escape
from rich.text import Text

from conftest import wait_for
from tests.repl_input import type_lines
from tests.test_tui_pilot import until
from ftui.jobs.chat_client import ChatWorker, Conversation, GenerationSettings

QUESTION = "What is ftui?"
ANSWER = "ftui is a terminal dashboard for fine-tuning language models on GPU servers."
GREEDY = GenerationSettings(temperature=0.0, max_new_tokens=60)


def answer(worker: ChatWorker, question: str, settings: GenerationSettings = GREEDY) -> tuple[str, list[dict], dict]:
    rid = worker.generate([{"role": "user", "content": question}], settings)
    tokens = []
    while True:
        reply = worker.get(timeout=120)
        assert reply is not None, "the worker stopped answering"
        if reply["type"] == "token":
            assert reply["id"] == rid
            tokens.append(reply)
        else:
            return "".join(t["text"] for t in tokens), tokens, reply


@pytest.mark.dist
def test_worker_streams_the_trained_answer_and_the_base_model_does_not_know_it(demo_run):
    worker = ChatWorker()
    try:
        loaded = worker.load(run=str(demo_run), device="cpu")
        assert loaded["type"] == "loaded" and loaded["label"].endswith("final"), loaded
        text, tokens, done = answer(worker, QUESTION)
        assert done["type"] == "done" and not done["stopped"] and done["tokens"] >= len(tokens) > 1
        assert done["tokens_per_s"] > 0
        assert text.strip() == ANSWER

        base = ChatWorker()
        try:
            assert base.load(run=str(demo_run), base=True, device="cpu")["type"] == "loaded"
            base_text, _, done = answer(base, QUESTION)
            assert done["type"] == "done" and base_text.strip() != ANSWER
        finally:
            base.close()
    finally:
        worker.close()


@pytest.mark.dist
def test_worker_stops_mid_answer_and_survives_a_bad_model_path(demo_run):
    worker = ChatWorker()
    try:
        assert worker.load(run=str(demo_run), base=True, device="cpu")["type"] == "loaded"
        rid = worker.generate([{"role": "user", "content": "talk"}], GenerationSettings(temperature=1.0, max_new_tokens=100000))
        first = worker.wait_for("token", timeout=120)
        assert first["type"] == "token"
        worker.stop()
        done = worker.wait_for("done", timeout=120)
        assert done["type"] == "done" and done["id"] == rid and done["stopped"] and done["tokens"] < 100000

        bad = worker.load(model="/no/such/model")
        assert bad["type"] == "error" and "not a model directory" in bad["message"]
        # still usable: load the trained model and answer
        assert worker.load(run=str(demo_run), device="cpu")["type"] == "loaded"
        assert answer(worker, QUESTION)[0].strip() == ANSWER
    finally:
        worker.close()


# `ftui chat --run R --prompt Q` printing the trained answer: tests/test_export.py::test_cli_export_of_the_demo_chats_as_the_run


def test_cli_chat_with_a_missing_run_exits_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "chat", "--run", "nope", "--root", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "nope" in out.stderr
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "chat"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--run" in out.stderr


def test_cli_chat_refuses_options_of_the_other_source(capsys):
    from ftui.cli.main import main

    for argv, says in ((["--model", "m", "--base"], "--checkpoint and --base go with --run"),
                       (["--model", "m", "--checkpoint", "4"], "--checkpoint and --base go with --run"),
                       (["--run", "r", "--adapter", "a"], "--adapter goes with --model"),
                       (["--run", "r", "--checkpoint", "4", "--base"], "--checkpoint or --base, not both"),
                       (["--run", "r", "--prompt", " "], "--prompt is empty")):
        assert main(["chat", *argv]) == 2, argv
        assert says in capsys.readouterr().err, argv


def test_cli_chat_refuses_a_source_that_is_not_there_before_loading_a_model(tmp_path, monkeypatch, capsys):
    """A missing checkpoint, a run with no weights yet or a device this machine lacks: exit 2
    and what to give, as ftui predict says it (it was exit 1, after starting the model's process,
    and a device torch does not know was said in torch's words)."""
    import ftui.jobs.chat_client
    from conftest import tiny_config
    from ftui.cli.main import main
    from ftui.machine.gpu import gpu_count
    from ftui.jobs.launch import prepare_run

    monkeypatch.setattr(ftui.jobs.chat_client, "ChatWorker", lambda: pytest.fail("no model is loaded for a refused source"))
    run = prepare_run(tiny_config(tmp_path, output_dir=str(tmp_path / "runs")))
    cases = [(["--run", str(run), "--checkpoint", "999"], "999"),
             (["--run", str(run)], "no final/ and no checkpoint yet"),
             (["--model", str(tmp_path)], "not a model directory")]
    if gpu_count() < 8:
        cases.append((["--run", str(run), "--base", "--device", "cuda:7"], "cuda:7" if gpu_count() else "no CUDA GPU was found"))
    for argv, says in cases:
        assert main(["chat", *argv]) == 2, argv
        assert says in " ".join(capsys.readouterr().err.split()), argv
    with pytest.raises(SystemExit) as info:
        main(["chat", "--run", str(run), "--device", "gpu"])
    assert info.value.code == 2 and "use auto, cpu, cuda or cuda:N" in capsys.readouterr().err


class FakeChatWorker:
    """The REPL's side of the worker protocol: loads at once, answers "hi" to everything."""

    def __init__(self):
        self.replies: list[dict] = []

    def load(self, **spec):
        return {"type": "loaded", "label": "fake", "device": "cpu"}

    def generate(self, messages, settings):
        self.replies = [{"id": 1, "type": "token", "text": "hi"}, {"id": 1, "type": "done", "tokens": 1, "stopped": False}]
        return 1

    def get(self, timeout=None):
        return self.replies.pop(0)

    def close(self):
        pass


def test_the_chat_repl_saves_and_a_failed_save_keeps_the_conversation(tmp_path, monkeypatch, capsys):
    import json

    import ftui.jobs.chat_client
    from ftui.cli.main import main

    monkeypatch.setattr(ftui.jobs.chat_client, "ChatWorker", FakeChatWorker)
    good = tmp_path / "conv.json"
    type_lines(monkeypatch, ["hello", f"/save {tmp_path / 'missing' / 'conv.json'}", f"/save {good}", "/clear", f"/save {tmp_path / 'empty.json'}"])
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert main(["chat", "--model", str(tmp_path / "m")]) == 0
    err = capsys.readouterr().err
    assert "could not save the conversation" in err and "missing" in err
    assert [m["content"] for m in json.loads(good.read_text())["messages"]] == ["hello", "hi"]
    assert json.loads((tmp_path / "empty.json").read_text())["messages"] == []


# --- The chat screen, with a fake worker (the pilot tests the screen, not the model)

MARKUP = "[bold]not bold[/] and [red]not red[/red] [/]"


class FakeWorker:
    def __init__(self, answer_parts=("Hello", " ", MARKUP), label="run final"):
        self.parts, self.label = answer_parts, label
        self.replies: queue.Queue = queue.Queue()
        self.sent: list = []
        self.next_id = 0

    def load(self, **spec):
        self.spec = spec
        label = "base of run" if spec.get("base") else self.label
        return {"type": "loaded", "label": label, "device": spec.get("device", "cpu"), "params": 1234}

    def generate(self, messages, settings):
        self.next_id += 1
        self.sent.append((messages, settings))
        for p in self.parts:
            self.replies.put({"type": "token", "id": self.next_id, "text": p})
        self.replies.put({"type": "done", "id": self.next_id, "tokens": 3, "seconds": 0.1, "tokens_per_s": 30.0, "stopped": False})
        return self.next_id

    def get(self, timeout=None):
        try:
            return self.replies.get(timeout=timeout)
        except queue.Empty:
            return None

    def stop(self):
        pass

    def close(self):
        pass


TITLE = "exp[/]old [b]final"


def fake_run(tmp_path: Path) -> Path:
    run = tmp_path / "run-1"
    (run / "final").mkdir(parents=True)
    (run / "checkpoints" / "step-2").mkdir(parents=True)
    return run


def chat_app(run: Path, workers: list, label: str = "run final"):
    from textual.app import App

    from ftui.tui.screens.chat import ChatScreen

    class ChatApp(App):
        CSS_PATH = str(Path(__file__).resolve().parent.parent / "ftui" / "tui" / "app.tcss")

        def on_mount(self):
            def factory():
                workers.append(FakeWorker(label=label))
                return workers[-1]

            self.push_screen(ChatScreen(run, worker_factory=factory))

    return ChatApp()


async def test_chat_screen_streams_literal_text_and_compares(tmp_path):
    from ftui.tui.screens.chat import ChatPane, read_sources, source_choices

    run = fake_run(tmp_path)
    assert [v for _, v in source_choices(read_sources(run))] == ["final", "step-2", "base"]
    workers: list = []
    app = chat_app(run, workers, label=TITLE)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: workers and getattr(workers[0], "spec", None))  # once the run's sources are read, the first loads
        assert workers[0].spec == {"run": str(run), "checkpoint": "final", "device": "cpu"}
        await pilot.press("ctrl+b")  # compare: a second worker with the base model
        await until(pilot, lambda: len(workers) > 1 and getattr(workers[1], "spec", None) and not app.screen.loading_panes)
        assert workers[1].spec["base"] is True
        await pilot.click("#chat-prompt")
        for ch in "hi":
            await pilot.press(ch)
        await pilot.press("enter")
        screen = app.screen
        await until(pilot, lambda: not screen.busy and all(  # both answers streamed in (thread workers)
            len(screen.conversations.get(pane, Conversation()).messages) == 2 for pane in ("main", "base")))
        for pane_id in ("#pane-main", "#pane-base"):
            pane = screen.query_one(pane_id, ChatPane)
            rendered = [w.render() for w in pane.query(".answer")]
            plain = "".join(r.plain if isinstance(r, Text) else str(r) for r in rendered)
            assert MARKUP in plain  # printed literally, markup and all
        assert screen.conversations["main"].messages == [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello " + MARKUP}]
        # the second question carries the history
        for ch in "ok":
            await pilot.press(ch)
        await pilot.press("enter")
        await until(pilot, lambda: not screen.busy and len(screen.conversations["main"].messages) == 4)  # both panes answered
        assert [m["content"] for m in workers[0].sent[-1][0]] == ["hi", "Hello " + MARKUP, "ok"]
        await pilot.press("ctrl+s")
        await until(pilot, lambda: any(str(n.message).startswith("saved ") for n in app._notifications))  # written by a worker
        saved = list(run.glob("chat-*.json"))
        assert len(saved) == 1 and MARKUP in saved[0].read_text()
        assert json.loads(saved[0].read_text())["model"] == TITLE  # the label as it is, not markup read back
        assert screen.query_one("#pane-main", ChatPane).border_title == escape(TITLE)  # shown literally, no crash
        await pilot.press("ctrl+l")
        await until(pilot, lambda: screen.conversations["main"].messages == [])
        assert screen.conversations["main"].messages == []


# --- The chat screen with real worker processes (a stub program in place of the model worker)

STUB = """
import json, sys, time
print(json.dumps({"type": "ready"}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "load":
        time.sleep(1.5)  # loading a model
        print(json.dumps({"type": "loaded", "label": "stub", "device": "cpu", "params": 1}), flush=True)
    elif req["op"] == "quit":
        break
    # "generate": reads a huge prompt for ever, and "stop" is not read meanwhile
"""


def stub_workers(tmp_path: Path):
    """A worker factory whose processes run STUB (ChatWorker runs `PYTHON -m ftui.runner chat`)."""
    stub = tmp_path / "stub-python"
    stub.write_text(f"#!{sys.executable}\n{STUB}")
    stub.chmod(0o755)
    return stub, lambda: ChatWorker(python=str(stub))


def worker_processes(stub: Path) -> list:
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if str(stub) in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


async def test_closing_the_chat_screen_at_once_ends_its_worker_every_time(tmp_path):
    from textual.app import App

    from tests.test_tui_pilot import until

    from ftui.tui.screens.chat import ChatScreen

    run = fake_run(tmp_path)
    stub, factory = stub_workers(tmp_path)
    app = App()
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(5):  # open, and close again while the model is still loading
            app.push_screen(ChatScreen(run, worker_factory=factory))
            await pilot.pause(0.1)
            await pilot.press("escape")
            await pilot.pause(0.1)
        await until(pilot, lambda: not worker_processes(stub))  # while the app still runs


async def test_esc_ends_a_worker_that_does_not_stop_and_reloads_it(tmp_path):
    from textual.app import App

    from ftui.tui.screens.chat import ChatPane, ChatScreen
    from tests.test_tui_pilot import until

    run = fake_run(tmp_path)
    stub, factory = stub_workers(tmp_path)
    app = App()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = ChatScreen(run, worker_factory=factory)
        app.push_screen(screen)
        await until(pilot, lambda: "main" in screen.workers_by_pane)
        first = screen.workers_by_pane["main"]
        screen.query_one("#chat-prompt").value = "x" * 100_000
        await pilot.press("enter")
        await until(pilot, lambda: screen.busy)
        await pilot.press("escape")  # "stop" is ignored: the screen ends the worker
        await until(pilot, lambda: not screen.busy and first.proc.poll() is not None)
        answers = "".join(w.render().plain for w in screen.query_one("#pane-main", ChatPane).query(".answer"))
        assert "stopped" in answers
        assert screen.conversations["main"].messages == []  # the unanswered question is not history
        await until(pilot, lambda: screen.workers_by_pane.get("main") not in (None, first))  # loaded again
        assert app.screen is screen  # Esc stopped the answer; it did not leave the screen
    assert wait_for(lambda: not worker_processes(stub), timeout=60)  # and the reloaded one ended with the app


def test_chat_screen_snapshot(snap_compare, tmp_path):
    run = fake_run(tmp_path)

    async def ask(pilot):
        await until(pilot, lambda: "main" in getattr(pilot.app.screen, "conversations", {}))  # the model has loaded (a thread worker)
        screen = pilot.app.screen
        await pilot.click("#chat-prompt")
        for ch in "What is ftui?":
            await pilot.press(ch if ch != " " else "space")
        await pilot.press("enter")
        await until(pilot, lambda: not screen.busy and len(screen.conversations["main"].messages) == 2)  # answered
        pilot.app.screen.query_one("#chat-prompt").cursor_blink = False  # a blinking cursor made the picture flaky
        await pilot.pause(0.1)

    assert snap_compare(chat_app(run, []), terminal_size=(100, 30), run_before=ask)


async def test_chat_screen_offers_the_visible_gpus_numbered_as_the_worker_sees_them(tmp_path, monkeypatch):
    from textual.widgets import Select

    from tests.fake_nvml import four_gpus, use_fake_nvml

    use_fake_nvml(monkeypatch, four_gpus())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-dddd")  # CUDA stops at the UUID: one GPU
    app = chat_app(fake_run(tmp_path), [])
    async with app.run_test(size=(100, 30)) as pilot:

        def offered() -> list | None:
            selects = app.screen.query("#chat-device")
            return [(str(label), value) for label, value in selects.first(Select)._options] if selects else None

        expected = [("CPU", "cpu"), ("GPU 0 (nvidia-smi 2)", "cuda:0")]
        await until(pilot, lambda: offered() == expected)  # NVML is read by a thread worker
        assert offered() == expected


def test_worker_refuses_a_gpu_the_process_cannot_see(monkeypatch):
    import torch

    from ftui.runner.chat import ChatError, pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert pick_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(ChatError, match=r"sees 1 GPU\(s\) \(CUDA_VISIBLE_DEVICES='3'\); use cuda:0 to cuda:0, or cpu"):
        pick_device("cuda:3")


def test_worker_uses_bf16_only_where_the_chosen_gpu_computes_it(monkeypatch):
    """A V100 / T4: is_bf16_supported() is True through emulation, False without it."""
    import contextlib

    import torch

    from ftui.runner.chat import chat_dtype

    chosen = []

    def device(d):
        chosen.append(d)
        return contextlib.nullcontext()

    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert chat_dtype(torch.device("cuda:1")) == torch.float32 and chosen == [torch.device("cuda:1")]
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # an A100
    assert chat_dtype(torch.device("cuda:1")) == torch.bfloat16
    assert chat_dtype(torch.device("cpu")) == torch.float32


class SlowLoadingWorker(FakeWorker):
    """A FakeWorker whose model loads only once ``loaded`` is set."""

    loaded = threading.Event()

    def load(self, **spec):
        assert self.loaded.wait(30)
        return super().load(**spec)


async def test_a_prompt_typed_while_the_model_loads_is_sent_once_it_has_loaded(tmp_path):
    from textual.app import App

    from ftui.tui.screens.chat import ChatPane, ChatScreen
    from tests.test_tui_pilot import until

    run = fake_run(tmp_path)
    workers: list = []
    SlowLoadingWorker.loaded = threading.Event()

    def factory():
        workers.append(SlowLoadingWorker())
        return workers[-1]

    app = App()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = ChatScreen(run, worker_factory=factory)
        app.push_screen(screen)
        await until(pilot, lambda: bool(workers))  # loading
        screen.query_one("#chat-prompt").value = "hi"
        await pilot.press("enter")

        def turns() -> str:
            return "".join(str(w.render()) for w in screen.query_one("#pane-main", ChatPane).query(".turn"))

        await until(pilot, lambda: screen.query_one("#chat-prompt").value == "" and "hi" in turns())
        assert screen.query_one("#chat-prompt").value == ""  # taken, not thrown away
        assert "hi" in turns()
        SlowLoadingWorker.loaded.set()
        await until(pilot, lambda: len(screen.conversations.get("main", Conversation()).messages) == 2)
        assert screen.conversations["main"].messages[0] == {"role": "user", "content": "hi"}
        assert [m["content"] for m in workers[0].sent[0][0]] == ["hi"]


async def test_ctrl_s_saves_both_sides_of_a_comparison(tmp_path):
    from tests.test_tui_pilot import until

    run = fake_run(tmp_path)
    workers: list = []
    app = chat_app(run, workers)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: "main" in app.screen.workers_by_pane)
        await pilot.press("ctrl+b")
        await until(pilot, lambda: "base" in app.screen.workers_by_pane)
        app.screen.query_one("#chat-prompt").value = "hi"
        await pilot.press("enter")
        await until(pilot, lambda: not app.screen.busy and len(app.screen.conversations["base"].messages) == 2)
        await pilot.press("ctrl+s")
        await until(pilot, lambda: any(str(n.message).startswith("saved ") for n in app._notifications))  # written by a worker
    saved = json.loads(next(run.glob("chat-*.json")).read_text())
    assert saved["model"] == "run final" and [m["content"] for m in saved["messages"]] == ["hi", "Hello " + MARKUP]
    assert saved["compared_with"]["model"] == "base of run"
    assert [m["content"] for m in saved["compared_with"]["messages"]] == ["hi", "Hello " + MARKUP]


async def test_chat_controls_fit_80_columns(tmp_path):
    app = chat_app(fake_run(tmp_path), [])
    async with app.run_test(size=(80, 24)) as pilot:

        def region():
            fields = app.screen.query("#chat-max")
            return fields.first().region if fields else None

        await until(pilot, lambda: region() is not None and region().width >= 7 and region().right <= 80)  # laid out
        assert region().width >= 7 and region().right <= 80  # the max-tokens field is whole


async def test_the_chat_footer_keeps_stop_back_and_quit_at_80_columns(tmp_path):
    from ftui.tui.app import FtuiApp
    from tests.test_tui_pilot import footer_keys_in_sight

    class WithQuit(type(chat_app(fake_run(tmp_path), []))):
        BINDINGS = FtuiApp.BINDINGS  # ftui's Quit, shown in the footer

    app = WithQuit()
    async with app.run_test(size=(80, 24)) as pilot:

        def fitted() -> bool:  # what footer_keys_in_sight asserts, once the footer has been fitted to 80 columns
            keys = {k.action: k for k in app.screen.query("FooterKey") if k.display and k.region.width}
            palette = keys.pop("command_palette", None)
            return (palette is not None and {"stop_or_back", "quit"} <= set(keys)
                    and all(k.region.right <= palette.region.x for k in keys.values()))

        # the model loaded (a thread worker): the bindings, and so the footer, change no more
        await until(pilot, lambda: "main" in getattr(app.screen, "conversations", {}) and not app.screen.loading_panes)
        await until(pilot, fitted)
        assert {"stop_or_back", "quit"} <= set(await footer_keys_in_sight(pilot, app.screen))
