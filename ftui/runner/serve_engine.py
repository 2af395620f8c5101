"""``ftui serve``'s generation worker: one generation at a time, a bounded queue, a stop per request.

A model generates one answer at a time here (transformers' ``generate`` on one model: batching
requests of different lengths, settings and adapters is vLLM's job, refused by name in ftui).
One worker thread owns the model; requests wait in a queue of ``queue_size`` behind the one
generating, and :meth:`Engine.submit` refuses any beyond it (:class:`QueueFull`: the app answers
429 with Retry-After, estimated from recent generation times), so a flood of requests costs a
bounded amount of memory. Each request carries its own stop event, checked after every token
(a StoppingCriteria): a client that goes away (:meth:`Engine.cancel`) or a server that stops
(:meth:`Engine.close`) ends its generation at the next token.

Generation goes through the inference backend (``ftui.runner.backends``, as the chat worker and
predict do): greedy at temperature 0, ending at EOS or the template's stop words. Text reaches a
streaming request through transformers' TextStreamer (whole words), and stop strings are cut
here: the text is cut before the first of them, and text that may begin one is held back until
it is known not to (:class:`TextOut`). The counters the job's ``serve_stats`` events carry are
:class:`ServeStats`. Each served model id is the main model or one LoRA adapter over the same
base (:class:`ModelSwitch`), picked per request under the one worker.
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
import time
import traceback
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

RECENT = 8  # generations whose durations estimate Retry-After
LOG_EVERY_S = 60.0  # a kind of failure is logged (a ``log`` event) at most once a minute


class QueueFull(Exception):
    """The queue holds ``queue_size`` requests already; ``retry_after``: seconds to wait."""

    def __init__(self, retry_after: int):
        super().__init__(f"the queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


class EngineClosed(Exception):
    """The server is stopping: no new generation starts."""


@dataclass
class Result:
    """How a generation ended. ``ended``: done, disconnected (the client went away), shutdown
    (the server is stopping) or failed (``error`` says why, for the server's log)."""

    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"  # stop | length
    ended: str = "done"
    error: str | None = None


@dataclass(eq=False)
class Generation:
    """One request's generation. ``sampling``: ``generate``'s keyword arguments (length,
    sampling, penalties); ``model``: the served id (:class:`ModelSwitch`); ``stops``: stop strings;
    ``on_text``: called from the worker with each piece of a streamed answer; ``on_done``: called
    once with the :class:`Result` (from the worker, or from the caller's thread when it never ran)."""

    prompt: list[int]
    sampling: dict[str, Any]
    on_done: Callable[[Result], None]
    model: str | None = None
    stops: list[str] = field(default_factory=list)
    seed: int | None = None
    on_text: Callable[[str], None] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    stop_reason: str = "disconnected"

    def end(self, reason: str) -> None:
        self.stop_reason = reason
        self.stop.set()


class ServeStats:
    """The serve job's counters (thread-safe). Each request to a completion endpoint counts once
    in ``requests`` and, once over, in exactly one of answered, rejected (429), errors (any
    other error status, a failed or cut generation) and disconnected (the client went away)."""

    FIELDS = ("requests", "answered", "rejected", "errors", "disconnected", "active", "queued",
              "prompt_tokens", "generated_tokens")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.started = clock()
        self.started_wall = time.time()  # the served models' "created"
        self._counts = dict.fromkeys(self.FIELDS, 0)
        self._logged: dict[str, float] = {}  # failure kind -> when it was last logged
        self._pending: list[tuple[str, str]] = []  # (level, message) for the job's log events

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, n in deltas.items():
                self._counts[name] += n

    def set(self, **values: int) -> None:
        with self._lock:
            self._counts.update(values)

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def uptime(self) -> float:
        return self._clock() - self.started

    def problem(self, kind: str, level: str, message: str) -> None:
        """A failed request, for the job's ``log`` events: once per ``kind`` per minute (a
        client that sends the same bad request a thousand times leaves one line). ``message``
        must hold no request text."""
        now = self._clock()
        with self._lock:
            last = self._logged.get(kind)
            if last is not None and now - last < LOG_EVERY_S:
                return
            self._logged[kind] = now
            self._pending.append((level, message))

    def take_problems(self) -> list[tuple[str, str]]:
        with self._lock:
            out, self._pending = self._pending, []
            return out


class TextOut:
    """A streamed answer's text with the stop strings applied: :meth:`add` takes each piece
    the streamer finalises and passes on what is certain (never text that may begin a stop
    string); :attr:`hit` once a stop string is in the text, which is then cut before it."""

    def __init__(self, stops: list[str], emit: Callable[[str], None] | None):
        self.stops = [s for s in stops if s]
        self.emit = emit
        self.text = ""
        self.sent = 0
        self.hit = False

    def add(self, piece: str) -> None:
        if self.hit or not piece:
            return
        self.text += piece
        cut = min((i for i in (self.text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.hit = True
            self.text = self.text[:cut]
            self._send(cut)
            return
        self._send(len(self.text) - self._held())

    def _held(self) -> int:
        """How many characters at the end may begin a stop string."""
        held = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(self.text)), held, -1):
                if self.text.endswith(s[:n]):
                    held = n
                    break
        return held

    def finish(self) -> None:
        """The answer is complete: what was held back is sent."""
        self._send(len(self.text))

    def _send(self, upto: int) -> None:
        if upto > self.sent:
            if self.emit is not None:
                self.emit(self.text[self.sent:upto])
            self.sent = upto


def cut_at_stops(text: str, stops: list[str]) -> tuple[str, bool]:
    """The text before the first stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class ModelSwitch:
    """Which weights answer for each served id: the main model, or a LoRA adapter loaded over
    the same base (peft's ``load_adapter``). ``main_adapter``: the adapter the main model is (a
    LoRA run's), None when the main model is the base itself (answered with the adapters off)."""

    def __init__(self, model: Any, main_id: str, main_adapter: str | None = None, adapters: dict[str, str] | None = None):
        self.model = model
        self.main_id = main_id
        self.main_adapter = main_adapter
        self.adapters = dict(adapters or {})  # served id -> peft adapter name

    @property
    def ids(self) -> list[str]:
        return [self.main_id, *self.adapters]

    @contextlib.contextmanager
    def use(self, model_id: str | None) -> Iterator[None]:
        adapter = self.adapters.get(model_id) if model_id != self.main_id else None
        if adapter is None and not self.adapters:
            yield  # one model: nothing to switch
        elif adapter is None and self.main_adapter is None:
            with self.model.disable_adapter():
                yield
        else:
            self.model.set_adapter(adapter or self.main_adapter)
            yield


class Engine:
    """The worker thread that owns the model, and the queue in front of it.

    ``loaded``: a ``ftui.runner.chat.ChatModel`` (model, tokenizer, device, stop ids);
    ``prompts``: the request-to-ids side (``ftui.runner.serve_prompts.Prompts``), which the app
    reaches as ``engine.prompts``; ``generate``: a backend's ``generate``."""

    def __init__(self, loaded: Any, switch: ModelSwitch, generate: Callable[..., list[tuple[str, int]]], prompts: Any,
                 queue_size: int = 8, stats: ServeStats | None = None):
        self.loaded = loaded
        self.switch = switch
        self.generate = generate
        self.prompts = prompts
        self.queue_size = max(0, int(queue_size))
        self.stats = stats or ServeStats()
        self.vocab_size = len(loaded.tokenizer)
        self._cond = threading.Condition()
        self._waiting: collections.deque[Generation] = collections.deque()
        self._active: Generation | None = None
        self._closed = False
        self._recent: collections.deque[float] = collections.deque(maxlen=RECENT)
        self._thread = threading.Thread(target=self._work, name="serve-generate", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # --- The queue

    def submit(self, gen: Generation) -> None:
        """Queues ``gen``; QueueFull beyond ``queue_size`` waiting, EngineClosed once stopping."""
        with self._cond:
            if self._closed:
                raise EngineClosed()
            if len(self._waiting) + (self._active is not None) > self.queue_size:
                raise QueueFull(self._retry_after())
            self._waiting.append(gen)
            self._count()
            self._cond.notify()

    def cancel(self, gen: Generation) -> None:
        """The client went away: a waiting request leaves the queue (its on_done gets a
        disconnected Result), a generating one stops at its next token."""
        with self._cond:
            waiting = gen in self._waiting
            if waiting:
                self._waiting.remove(gen)
                self._count()
            gen.end("disconnected")
        if waiting:
            gen.on_done(Result(prompt_tokens=len(gen.prompt), ended="disconnected"))

    def close(self, timeout: float | None = 30.0) -> None:
        """Stops: no new request, the waiting ones answered ``shutdown``, the one generating
        stopped at its next token; returns once the worker has ended (or ``timeout``)."""
        with self._cond:
            self._closed = True
            dropped = list(self._waiting)
            self._waiting.clear()
            if self._active is not None:
                self._active.end("shutdown")
            self._count()
            self._cond.notify_all()
        for gen in dropped:
            gen.end("shutdown")
            gen.on_done(Result(prompt_tokens=len(gen.prompt), ended="shutdown"))
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _count(self) -> None:
        self.stats.set(active=int(self._active is not None), queued=len(self._waiting))

    def _retry_after(self) -> int:
        """Seconds until a place in the queue is likely free: about one generation."""
        mean = sum(self._recent) / len(self._recent) if self._recent else 1.0
        return max(1, math.ceil(mean))

    def retry_after(self) -> int:
        with self._cond:
            return self._retry_after()

    # --- The worker

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if not self._waiting:
                    return
                gen = self._active = self._waiting.popleft()
                self._count()
            started = time.monotonic()
            try:
                result = self._run(gen)
            except BaseException as exc:  # the request fails, the server goes on
                traceback.print_exc(file=sys.stderr)
                result = Result(prompt_tokens=len(gen.prompt), ended="failed", error=type(exc).__name__)
            with self._cond:
                self._active = None
                self._recent.append(time.monotonic() - started)
                self._count()
            gen.on_done(result)

    def _run(self, gen: Generation) -> Result:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList, TextStreamer

        stats = self.stats
        out = TextOut(gen.stops, gen.on_text)

        class Counting(TextStreamer):
            """Counts the generated tokens as they come (the job's generated_tokens) and hands
            the finished words to ``out``."""

            count = 0

            def put(self, value: Any) -> None:
                if not (self.skip_prompt and self.next_tokens_are_prompt):
                    n = int(value.numel())
                    self.count += n
                    stats.add(generated_tokens=n)
                super().put(value)

            def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
                out.add(text)

        class Stop(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                return gen.stop.is_set() or out.hit

        streamer = Counting(self.loaded.tokenizer, skip_prompt=True, skip_special_tokens=True)
        stats.add(prompt_tokens=len(gen.prompt))
        if gen.stop.is_set():
            return Result(prompt_tokens=len(gen.prompt), ended=gen.stop_reason)
        with self.switch.use(gen.model):
            if gen.seed is not None:
                torch.manual_seed(gen.seed)  # under the one worker: the same seed, the same sampled answer
            [(answer, n)] = self.generate(self.loaded, [gen.prompt], gen.sampling, streamer=streamer,
                                          stopping_criteria=StoppingCriteriaList([Stop()]))
        text, hit = cut_at_stops(answer, gen.stops)
        if not gen.stop.is_set():
            out.finish()
        ended = gen.stop_reason if gen.stop.is_set() else "done"
        length = not hit and n >= int(gen.sampling.get("max_new_tokens", 0) or 0) > 0
        return Result(text=text, prompt_tokens=len(gen.prompt), completion_tokens=n,
                      finish_reason="length" if length else "stop", ended=ended)
