"""``ftui serve``'s dynamic batching: which waiting requests share a ``generate`` call, and each
row's answer streamed, stopped and ended on its own.

:func:`pick` takes the first waiting request, then every other waiting one that can share its
batch (:func:`batch_key`: the same served model, the same sampling settings but the length, no
seed, no logit_bias differences), up to ``max_batch``; a seeded request runs alone, so that its
seed gives the answer it gives alone. The rest keep their order.

:func:`run_batch` generates the batch in one call of the backend (its prompts left-padded, the
longest max_tokens of the batch): :class:`Rows` is both the streamer and the stopping criteria.
As a streamer (``put``) it gets each step's (B,) new tokens (the first put, the prompts, is
skipped); each row takes its tokens until its first stop id (the model's EOS or the template's
stop words), its own max_tokens, or a stop string, decodes them so far and passes the new text
to its request's :class:`TextOut` once it does not end in an
incomplete character. As a criteria it answers one bool per row (transformers' StoppingCriteria
may return a (B,) BoolTensor; a row marked done is padded from then on): done once the row has
ended, reached its max_tokens, or its request's stop event is set (client gone, server
stopping). transformers calls the criteria before the streamer in each step, so a stop string
(found by the streamer) marks its row done one token late; that token is not part of the answer.
Each request's :class:`Result` comes from its own row, not from the
backend's decoded answers, and is handed over (``on_done``) as soon as the row ends, while the
rest of the batch goes on; a finished row's slot idles until the batch ends (no continuous batching).

A request (:class:`Generation`), its end (:class:`Result`) and its text with the stop strings
applied (:class:`TextOut`) are defined here; the engine (``ftui.runner.serve_engine``) imports them.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any, Callable


LENGTH_KEY = "max_new_tokens"


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
    sampling, penalties); ``model``: the served id (``serve_engine.ModelSwitch``); ``stops``: stop strings;
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


def batch_key(gen: Generation) -> tuple[Any, ...] | None:
    """What requests must share to be generated together, None for a request that runs alone
    (a seed). The sampling settings but the length compare as the dict the backend gets (its
    sequence_bias is a request's logit_bias)."""
    if gen.seed is not None:
        return None
    rest = {k: v for k, v in gen.sampling.items() if k != LENGTH_KEY}
    return (gen.model, sorted(rest.items(), key=lambda kv: kv[0]))


def pick(waiting: collections.deque[Generation], max_batch: int) -> list[Generation]:
    """The next batch, taken out of ``waiting``: its first request, then those that can share
    its batch in their order, ``max_batch`` at most."""
    first = waiting.popleft()
    batch = [first]
    key = batch_key(first)
    if key is None or max_batch <= 1:
        return batch
    kept: list[Generation] = []
    while waiting:
        gen = waiting.popleft()
        if len(batch) < max_batch and batch_key(gen) == key:
            batch.append(gen)
        else:
            kept.append(gen)
    waiting.extend(kept)
    return batch


class Row:
    """One request's row of a batch: its tokens, its text so far, how it ended."""

    def __init__(self, gen: Generation):
        self.gen = gen
        self.out = TextOut(gen.stops, gen.on_text)
        self.limit = int(gen.sampling.get(LENGTH_KEY, 0) or 0)
        self.tokens: list[int] = []  # the answer's tokens since its last finished line
        self.decoded = ""  # the text of ``tokens`` passed on so far
        self.count = 0  # the answer's tokens (its stop id not counted)
        self.open = True
        self.eos = False

    def take(self, token: int, stop_ids: set[int], decode: Callable[[list[int]], str]) -> int:
        """One new token; how many generated tokens it counts for (0 once the row has ended)."""
        if not self.open:
            return 0
        if self.gen.stop.is_set():
            self.open = False
            return 0
        if token in stop_ids:
            self.eos = True
            self.open = False
            return 1
        self.tokens.append(token)
        self.count += 1
        self._text(decode, final=False)
        if self.out.hit or (self.limit and self.count >= self.limit):
            self.open = False
        return 1

    def _text(self, decode: Callable[[list[int]], str], final: bool) -> None:
        text = decode(self.tokens)
        if not final and text.endswith("\ufffd"):
            return  # an incomplete character: its next token completes it
        self.out.add(text[len(self.decoded):])
        self.decoded = text
        if text.endswith("\n") and not final:  # a line is done: decode from here on (bounded cost, as TextStreamer)
            self.tokens, self.decoded = [], ""

    def result(self) -> Result:
        """How the row ended (the batch's end for a row still open)."""
        gen = self.gen
        if gen.stop.is_set():
            return Result(text=self.out.text, prompt_tokens=len(gen.prompt), completion_tokens=self.count,
                          ended=gen.stop_reason)
        self.out.finish()
        length = not self.out.hit and not self.eos and self.limit > 0 and self.count >= self.limit
        return Result(text=self.out.text, prompt_tokens=len(gen.prompt), completion_tokens=self.count,
                      finish_reason="length" if length else "stop")


class Rows:
    """A batch's rows: the streamer (``put``/``end``) and the stopping criteria (``__call__``)
    of its one ``generate`` call. ``on_row_done(row, result)``: called once per row as it ends."""

    def __init__(self, gens: list[Generation], tokenizer: Any, stop_ids: list[int], stats: Any,
                 on_row_done: Callable[[Row, Result], None]):
        self.rows = [Row(gen) for gen in gens]
        self.tokenizer = tokenizer
        self.stop_ids = set(stop_ids)
        self.stats = stats
        self.on_row_done = on_row_done
        self.prompt_seen = False
        self.reported: set[int] = set()
        self._done: tuple[tuple[bool, ...], Any] | None = None  # the criteria's last answer, kept on the device

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    # --- The streamer

    def put(self, value: Any) -> None:
        if not self.prompt_seen:  # the prompts (as TextStreamer's skip_prompt)
            self.prompt_seen = True
            return
        tokens = value.reshape(-1).tolist()
        counted = 0
        for i, (row, token) in enumerate(zip(self.rows, tokens)):
            counted += row.take(int(token), self.stop_ids, self.decode)
            if not row.open:
                self.report(i)
        if counted:
            self.stats.add(generated_tokens=counted)

    def end(self) -> None:
        """The batch's generation is over: each row still open ends here."""
        for i, row in enumerate(self.rows):
            row.open = False
            self.report(i)

    def report(self, i: int) -> None:
        if i in self.reported:
            return
        self.reported.add(i)
        row = self.rows[i]
        if not row.gen.stop.is_set():
            row._text(self.decode, final=True)  # what an incomplete character held back
        self.on_row_done(row, row.result())

    # --- The stopping criteria

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        # called before this step's tokens reach put: a row's newest token is not counted yet
        done = tuple(not row.open or row.gen.stop.is_set() or bool(row.limit and row.count + 1 >= row.limit) for row in self.rows)
        if self._done is None or self._done[0] != done:  # a copy to the device only when a row changes
            self._done = (done, torch.tensor(done, dtype=torch.bool, device=input_ids.device))
        return self._done[1]


def run_batch(engine: Any, gens: list[Generation], on_row_done: Callable[[Row, Result], None]) -> Rows:
    """Generates ``gens`` (one batch, from :func:`pick`) through the engine's backend; each row's
    Result goes to ``on_row_done`` as it ends. Raises what the generation raises (the rows not yet
    ended are then the caller's to fail)."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    rows = Rows(gens, engine.loaded.tokenizer, list(engine.loaded.stop_ids or []), engine.stats, on_row_done)

    class Criteria(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return rows(input_ids, scores, **kwargs)

    first = gens[0]
    sampling = dict(first.sampling)
    longest = max(int(g.sampling.get(LENGTH_KEY, 0) or 0) for g in gens)
    if longest:
        sampling[LENGTH_KEY] = longest
    with engine.switch.use(first.model):
        if first.seed is not None:
            torch.manual_seed(first.seed)  # alone in its batch: the same seed, the same sampled answer
        engine.generate(engine.loaded, [g.prompt for g in gens], sampling, streamer=rows,
                        stopping_criteria=StoppingCriteriaList([Criteria()]))
    rows.end()
    return rows
