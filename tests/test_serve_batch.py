"""``ftui serve``'s dynamic batching (ftui.runner.serve_batch) on the trained demo: the Engine
driven directly (no server), on the CPU in fp32, greedy, a few tokens each.

Requests submitted before the worker starts are all waiting when it takes its first batch, so
which of them share a batch is known; the backend's calls are counted by a wrapper.
"""

from __future__ import annotations

import threading

import pytest

from ftui.config.load import read_run_config

QUESTION = "What is ftui?"
OTHER = "Which command trains the demo?"
GREEDY = {"max_new_tokens": 24, "do_sample": False}


@pytest.fixture(scope="module")
def demo(demo_run):
    """(loaded ChatModel, Prompts) of the demo run's final model on the CPU."""
    from ftui.runner.chat import ChatModel
    from ftui.runner.serve_prompts import Prompts

    loaded = ChatModel()
    loaded.load({"run": str(demo_run), "checkpoint": None, "base": False, "device": "cpu"})
    return loaded, Prompts(loaded, read_run_config(demo_run / "config.yaml"))


class Calls:
    """The backend's generate, counting its calls and each call's batch size."""

    def __init__(self):
        from ftui.runner.backends.huggingface import generate

        self.real = generate
        self.sizes: list[int] = []
        self.started = threading.Event()  # set once a call's first token is out
        self.hold: threading.Event | None = None  # when given, each call waits for it once its first tokens are out

    def __call__(self, loaded, prompts, sampling, **kw):
        self.sizes.append(len(prompts))
        streamer = kw.get("streamer")
        if self.hold is not None and streamer is not None:
            hold, put = self.hold, streamer.put
            seen = [0]

            def waiting_put(value):
                put(value)
                seen[0] += 1
                if seen[0] == 2:  # the prompts, then the first new tokens
                    self.started.set()
                    hold.wait(60)

            streamer.put = waiting_put
        return self.real(loaded, prompts, sampling, **kw)


class Ask:
    """One request to the engine, its streamed pieces and its Result once done."""

    def __init__(self, prompts, text: str, sampling: dict | None = None, **kw):
        from ftui.runner.serve_engine import Generation

        self.pieces: list[str] = []
        self.done = threading.Event()
        self.result = None
        self.gen = Generation(prompts.chat([{"role": "user", "content": text}], None).ids, dict(sampling or GREEDY),
                              on_done=self._done, on_text=self.pieces.append, model="demo", **kw)

    def _done(self, result) -> None:
        self.result = result
        self.done.set()

    def wait(self):
        assert self.done.wait(120), "no answer"
        return self.result


def engine_for(demo, calls: Calls, queue_size: int = 8, max_batch: int = 8, **kw):
    from ftui.runner.serve_engine import Engine, ModelSwitch

    loaded, prompts = demo
    return Engine(loaded, ModelSwitch(loaded.model, "demo"), calls, prompts, queue_size=queue_size, max_batch=max_batch, **kw)


def answers(demo, asks_of, max_batch: int = 8, queue_size: int = 8):
    """Submits every request before the worker starts; (the Asks, the backend's batch sizes)."""
    calls = Calls()
    engine = engine_for(demo, calls, queue_size, max_batch)
    asks = asks_of(demo[1])
    for ask in asks:
        engine.submit(ask.gen)
    engine.start()
    try:
        for ask in asks:
            ask.wait()
    finally:
        engine.close()
    return asks, calls.sizes


@pytest.fixture(scope="module")
def alone(demo):
    """Each question's greedy answer generated alone (max_batch 1): {question: Result}."""
    asks, sizes = answers(demo, lambda p: [Ask(p, QUESTION), Ask(p, OTHER)], max_batch=1)
    assert sizes == [1, 1]
    return {QUESTION: asks[0].result, OTHER: asks[1].result}


def test_requests_waiting_together_run_as_one_batch_and_each_gets_its_own_answer(demo, alone):
    asks, sizes = answers(demo, lambda p: [Ask(p, QUESTION), Ask(p, OTHER), Ask(p, QUESTION), Ask(p, QUESTION)])
    assert sizes == [4]
    for ask, question in zip(asks, (QUESTION, OTHER, QUESTION, QUESTION)):
        got, want = ask.result, alone[question]
        assert (got.ended, got.text, got.completion_tokens, got.finish_reason) == (
            "done", want.text, want.completion_tokens, want.finish_reason)
        assert "".join(ask.pieces) == got.text  # streamed per row, the same text
    assert alone[QUESTION].text and alone[QUESTION].text != alone[OTHER].text


def test_max_batch_one_keeps_one_at_a_time_and_seeded_or_other_settings_run_apart(demo):
    _asks, sizes = answers(demo, lambda p: [Ask(p, QUESTION) for _ in range(3)], max_batch=1)
    assert sizes == [1, 1, 1]
    sampled = {"max_new_tokens": 4, "do_sample": True, "temperature": 0.9, "top_p": 0.7}

    def mixed(p):
        return [Ask(p, QUESTION, seed=7), Ask(p, QUESTION), Ask(p, OTHER, sampled), Ask(p, OTHER),
                Ask(p, QUESTION, {**GREEDY, "max_new_tokens": 3}), Ask(p, OTHER, sampled)]

    asks, sizes = answers(demo, mixed)
    # the seeded one alone; greedy ones share (max_new_tokens may differ: each row ends at its own); the sampled two share
    assert sizes == [1, 3, 2]
    assert asks[4].result.completion_tokens == 3 and asks[4].result.finish_reason == "length"


def test_a_stop_string_in_one_row_cuts_only_that_row(demo, alone):
    answer = alone[QUESTION].text
    word = answer.split()[2]
    asks, sizes = answers(demo, lambda p: [Ask(p, QUESTION, stops=[word]), Ask(p, QUESTION)])
    assert sizes == [2]
    cut, whole = asks[0].result, asks[1].result
    assert cut.text == answer[:answer.index(word)] and "".join(asks[0].pieces) == cut.text
    assert cut.finish_reason == "stop" and cut.completion_tokens < whole.completion_tokens
    assert whole.text == answer


def test_a_request_cancelled_mid_batch_ends_while_the_others_finish(demo, alone):
    calls = Calls()
    calls.hold = threading.Event()
    engine = engine_for(demo, calls)
    _loaded, prompts = demo
    asks = [Ask(prompts, QUESTION), Ask(prompts, OTHER), Ask(prompts, QUESTION)]
    for ask in asks:
        engine.submit(ask.gen)
    engine.start()
    try:
        assert calls.started.wait(120)
        assert engine.stats.get("active") == 3
        engine.cancel(asks[1].gen)
        calls.hold.set()
        results = [ask.wait() for ask in asks]
    finally:
        engine.close()
    assert calls.sizes == [3]
    assert results[1].ended == "disconnected" and results[1].completion_tokens <= 2
    assert [r.text for r in (results[0], results[2])] == [alone[QUESTION].text] * 2
    assert engine.stats.get("active") == 0


def test_the_queue_bound_counts_the_rows_generating(demo):
    from ftui.runner.serve_engine import QueueFull

    calls = Calls()
    calls.hold = threading.Event()
    engine = engine_for(demo, calls, queue_size=2, max_batch=4)
    _loaded, prompts = demo
    first = [Ask(prompts, QUESTION) for _ in range(3)]  # idle: 2 waiting + 1 more, which starts at once
    for ask in first:
        engine.submit(ask.gen)
    with pytest.raises(QueueFull):
        engine.submit(Ask(prompts, QUESTION).gen)
    engine.start()
    try:
        assert calls.started.wait(120)  # the three generate as one batch: the queue is empty again
        assert engine.stats.snapshot()["active"] == 3 and engine.stats.get("queued") == 0
        later = [Ask(prompts, QUESTION) for _ in range(2)]
        for ask in later:
            engine.submit(ask.gen)
        with pytest.raises(QueueFull) as full:  # 2 waiting behind a batch of 3
            engine.submit(Ask(prompts, QUESTION).gen)
        assert full.value.retry_after >= 1
        calls.hold.set()
        for ask in first + later:
            assert ask.wait().ended == "done"
    finally:
        engine.close()
    assert calls.sizes == [3, 2]


def test_the_idle_worker_gathers_requests_sent_one_after_another_into_one_batch(demo):
    """Requests submitted one by one to a running, idle engine: the worker waits for its batch to
    fill (gather_s, an hour here) and starts as soon as it is full, not at the end of the wait."""
    calls = Calls()
    engine = engine_for(demo, calls, max_batch=3, gather_s=3600.0)
    engine.start()
    try:
        asks = [Ask(demo[1], QUESTION), Ask(demo[1], OTHER), Ask(demo[1], QUESTION)]
        for ask in asks:
            engine.submit(ask.gen)
        results = [ask.wait() for ask in asks]  # within wait()'s 120 s: the full batch did not wait the hour out
        assert calls.sizes == [3] and all(r.ended == "done" and r.text for r in results)
        late = Ask(demo[1], OTHER)  # alone now, gathering for an hour: close() ends the wait and answers it
        engine.submit(late.gen)
    finally:
        engine.close()
    assert late.wait().ended == "shutdown" and calls.sizes == [3]
