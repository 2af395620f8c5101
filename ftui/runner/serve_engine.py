"""``ftui serve``'s generation worker: requests batched dynamically, a bounded queue, a stop per request.

One worker thread owns the model. transformers' ``generate`` is launch-bound at batch 1 on a GPU
(a step of 8 rows costs about what a step of 1 does), so the worker generates the waiting
requests that can share a batch together (``max_batch``, job.json's, 1: one at a time): it takes
the first waiting request, then every other one with the same model id and sampling settings
and no seed, up to ``max_batch`` (``ftui.runner.serve_batch``, which also streams and stops each
row on its own); an idle worker first waits up to ``GATHER_S`` (20 ms) for the batch to fill
(:meth:`Engine._gather`). No continuous batching (vLLM's job, refused by name in ftui): a batch runs to
its end; a row that has ended idles until then, its answer already handed over.
Requests wait in a queue of ``queue_size`` behind the batch generating, and
:meth:`Engine.submit` refuses any beyond it (:class:`QueueFull`: the app answers 429 with
Retry-After, estimated from recent batch durations), so a flood of requests costs a bounded
amount of memory. Each request carries its own stop event, checked after every token (a
StoppingCriteria with a bool per row): a client that goes away (:meth:`Engine.cancel`) or a
server that stops (:meth:`Engine.close`) ends its row at the next token.

Generation goes through the inference backend (``ftui.runner.backends``, as the chat worker and
predict do): greedy at temperature 0, ending at EOS or the template's stop words. Stop strings
are cut here: the text is cut before the first of them, and text that may begin one is held
back until it is known not to (``serve_batch.TextOut``). The counters the job's ``serve_stats`` events
carry are :class:`ServeStats` (``active``: the rows generating). Each served model id is the
main model or one LoRA adapter over the same base (:class:`ModelSwitch`), picked per batch
under the one worker.
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
import time
import traceback
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ftui.runner.serve_batch import Generation, Result, pick, run_batch

GATHER_S = 0.02  # how long the idle worker waits for a batch's other requests (see Engine._gather)
RECENT = 8  # generations whose durations estimate Retry-After
LOG_EVERY_S = 60.0  # a kind of failure is logged (a ``log`` event) at most once a minute


class QueueFull(Exception):
    """The queue holds ``queue_size`` requests already; ``retry_after``: seconds to wait."""

    def __init__(self, retry_after: int):
        super().__init__(f"the queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


class EngineClosed(Exception):
    """The server is stopping: no new generation starts."""


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
                 queue_size: int = 8, stats: ServeStats | None = None, max_batch: int = 8, gather_s: float = GATHER_S):
        self.loaded = loaded
        self.gather_s = gather_s
        self.switch = switch
        self.generate = generate
        self.prompts = prompts
        self.queue_size = max(0, int(queue_size))
        self.max_batch = max(1, int(max_batch))
        self.stats = stats or ServeStats()
        self.vocab_size = len(loaded.tokenizer)
        self._cond = threading.Condition()
        self._waiting: collections.deque[Generation] = collections.deque()
        self._active: list[Generation] = []  # the batch's rows still generating
        self._running = False  # a batch is generating (its ended rows' slots idle until its end)
        self._closed = False
        self._recent: collections.deque[float] = collections.deque(maxlen=RECENT)
        self._thread = threading.Thread(target=self._work, name="serve-generate", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # --- The queue

    def submit(self, gen: Generation) -> None:
        """Queues ``gen``; QueueFull beyond ``queue_size`` waiting (one more while no batch
        generates: it starts at once), EngineClosed once stopping."""
        with self._cond:
            if self._closed:
                raise EngineClosed()
            if len(self._waiting) >= self.queue_size + (not self._running):
                raise QueueFull(self._retry_after())
            self._waiting.append(gen)
            self._count()
            self._cond.notify()

    def cancel(self, gen: Generation) -> None:
        """The client went away: a waiting request leaves the queue (its on_done gets a
        disconnected Result), a generating one's row stops at its next token."""
        with self._cond:
            waiting = gen in self._waiting
            if waiting:
                self._waiting.remove(gen)
                self._count()
            gen.end("disconnected")
        if waiting:
            gen.on_done(Result(prompt_tokens=len(gen.prompt), ended="disconnected"))

    def close(self, timeout: float | None = 30.0) -> None:
        """Stops: no new request, the waiting ones answered ``shutdown``, the rows generating
        stopped at their next token; returns once the worker has ended (or ``timeout``)."""
        with self._cond:
            self._closed = True
            dropped = list(self._waiting)
            self._waiting.clear()
            for gen in self._active:
                gen.end("shutdown")
            self._count()
            self._cond.notify_all()
        for gen in dropped:
            gen.end("shutdown")
            gen.on_done(Result(prompt_tokens=len(gen.prompt), ended="shutdown"))
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _count(self) -> None:
        self.stats.set(active=len(self._active), queued=len(self._waiting))

    def _retry_after(self) -> int:
        """Seconds until a place in the queue is likely free: about one batch (the next one
        takes up to ``max_batch`` of the waiting requests when the one generating ends)."""
        mean = sum(self._recent) / len(self._recent) if self._recent else 1.0
        return max(1, math.ceil(mean))

    def retry_after(self) -> int:
        with self._cond:
            return self._retry_after()

    # --- The worker

    def _gather(self) -> None:
        """Under the lock, with a request waiting: waits up to ``gather_s`` for the batch to fill.
        Clients whose answers came in the same batch send their next requests within a few
        milliseconds of each other; without this pause the first of them would start a batch
        of one and the others wait a whole batch for it (batches of 1 and 7 in turn: an H200
        served 108 tokens/s instead of what a batch of 8 makes). A batch already full, a
        max_batch of 1 and a stopping server do not wait."""
        deadline = time.monotonic() + self.gather_s
        while not self._closed and 1 < self.max_batch and len(self._waiting) < self.max_batch:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._cond.wait(left)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if not self._waiting:
                    return
                self._gather()
                if not self._waiting:  # cancelled, or dropped by close(), while the batch gathered
                    continue
                batch = pick(self._waiting, self.max_batch)
                self._active, self._running = list(batch), True
                self._count()
            started = time.monotonic()
            done: set[int] = set()

            def row_done(row: Any, result: Result) -> None:
                done.add(id(row.gen))
                with self._cond:
                    if row.gen in self._active:
                        self._active.remove(row.gen)
                    self._count()
                row.gen.on_done(result)

            live = []
            for gen in batch:  # cancelled between the queue and the batch
                if gen.stop.is_set():
                    row_done(_Gone(gen), Result(prompt_tokens=len(gen.prompt), ended=gen.stop_reason))
                else:
                    live.append(gen)
            self.stats.add(prompt_tokens=sum(len(g.prompt) for g in live))
            try:
                if live:
                    run_batch(self, live, row_done)
            except BaseException as exc:  # the batch's requests fail, the server goes on
                traceback.print_exc(file=sys.stderr)
                for gen in live:
                    if id(gen) not in done:
                        row_done(_Gone(gen), Result(prompt_tokens=len(gen.prompt), ended="failed", error=type(exc).__name__))
            with self._cond:
                self._active, self._running = [], False
                self._recent.append(time.monotonic() - started)
                self._count()


@dataclass
class _Gone:
    """A request's row that never generated (the worker's ``row_done`` reads its ``gen``)."""

    gen: Generation
