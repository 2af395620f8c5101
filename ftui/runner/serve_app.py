"""``ftui serve``'s HTTP API: FastAPI routes in OpenAI's shapes over the generation worker.

    GET  /health                 {"status": "ok"}, no key needed (a load balancer's probe)
    GET  /v1/models              the served ids: the main model, then each LoRA adapter's name
    POST /v1/chat/completions    the run's chat template; streamed (SSE) or not; tools
    POST /v1/completions         a raw text continuation (no template)

Safe by default: with a key, every /v1 route wants ``Authorization: Bearer KEY`` (compared in
constant time) and answers 401 otherwise, before reading the body; a body is refused (413)
above ``max_body_bytes``, by its Content-Length and while it is read; ``max_tokens`` is clamped
to ``max_tokens_limit``; the engine's queue is bounded (429 with Retry-After beyond it). No
CORS headers (a web page of another origin gets no answer it can read), no docs routes.

Errors are OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, in English
like the protocol's own. A client that goes away stops its generation: a stream's end is
noticed by sse-starlette, a waiting non-streamed request polls ``is_disconnected``. The job's
counters (``engine.stats``) count each request once (``ftui.runner.serve_engine.ServeStats``);
a failed request leaves a ``log`` line without its text, once per kind a minute.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from sse_starlette import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ftui.data.openai_chat import ChatRequestError, tool_calls_from_text
from ftui.runner.generate import sampling_kwargs
from ftui.runner.serve_engine import EngineClosed, Generation, QueueFull, Result
from ftui.runner import serve_protocol as p

POLL_S = 0.25  # how often a waiting non-streamed request checks that its client is still there


@dataclass(frozen=True)
class Limits:
    """A serve job's bounds and defaults (job.json's queue_size sits with the engine)."""

    max_tokens_limit: int = 4096
    max_body_bytes: int = 1 << 20
    defaults: dict[str, Any] = field(default_factory=lambda: {"max_new_tokens": 512, "temperature": 0.95, "top_p": 0.7})


class ApiError(Exception):
    """An error answer: its status, OpenAI's error type and code, and headers (Retry-After)."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type_, code, param
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse(p.error_body(self.message, self.type, self.code, self.param), status_code=self.status,
                            headers=self.headers)


class _Disconnected(Exception):
    """The client of a waiting request went away."""


def build_app(engine: Any, models: list[str], key: str | None, limits: Limits) -> FastAPI:
    """The app over ``engine`` (``ftui.runner.serve_engine.Engine`` or a stand-in with its
    ``submit``, ``cancel``, ``stats``, ``vocab_size`` and ``prompts``); ``models``: the served
    ids, the main model first; ``key``: the API key (None: open, which the job allows on a
    loopback address only)."""
    app = FastAPI(title="ftui serve", docs_url=None, redoc_url=None, openapi_url=None)
    stats = engine.stats
    created = int(stats.started_wall)
    expected = ("Bearer " + key).encode() if key else None

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, err: ApiError) -> JSONResponse:
        return err.response()

    @app.exception_handler(_Disconnected)
    async def gone(_request: Request, _err: _Disconnected) -> Response:
        return Response(status_code=499)  # nobody reads it: the client has gone

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, err: StarletteHTTPException) -> JSONResponse:
        kind = "not_found" if err.status_code == 404 else "method_not_allowed" if err.status_code == 405 else None
        return ApiError(err.status_code, str(err.detail), code=kind, headers=dict(err.headers or {})).response()

    @app.exception_handler(Exception)
    async def server_error(_request: Request, err: Exception) -> JSONResponse:
        stats.problem(f"500 {type(err).__name__}", "error", f"a request failed with {type(err).__name__} (HTTP 500); "
                      "the traceback is in the job's log")
        return ApiError(500, "internal error; the server's log has the details", "server_error").response()

    def authorize(request: Request) -> None:
        if expected is None:
            return
        given = request.headers.get("authorization", "").encode("latin-1", "replace")
        if not hmac.compare_digest(given, expected):
            raise ApiError(401, "Invalid API key: send it as the header 'Authorization: Bearer KEY'",
                           code="invalid_api_key")

    def served(model: str) -> str:
        if model not in models:
            raise ApiError(404, f"model {model!r} is not served here; served: {', '.join(models)}", code="model_not_found",
                           param="model")
        return model

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def list_models(request: Request) -> JSONResponse:
        authorize(request)
        cards = [p.ModelCard(id=m, created=created) for m in models]
        return JSONResponse(p.ModelList(data=cards).model_dump(mode="json"))

    @app.get("/v1/models/{model_id:path}")
    async def one_model(model_id: str, request: Request) -> JSONResponse:
        authorize(request)
        return JSONResponse(p.ModelCard(id=served(model_id), created=created).model_dump(mode="json"))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        authorize(request)
        async with counted(stats, "/v1/chat/completions"):
            req = parse(p.ChatCompletionRequest, await read_body(request, limits.max_body_bytes))
            served(req.model)
            refuse_unsupported(req)
            try:
                prompt = engine.prompts.chat(req.messages, req.tools)
            except ChatRequestError as err:
                raise ApiError(400, str(err), code="invalid_messages", param="messages") from None
            gen, bridge = generation(req, prompt.ids, stream=req.stream and prompt.tool_format is None)
            if not req.stream:
                result = await settled(request, gen, bridge)
                stats.add(answered=1)
                return JSONResponse(chat_answer(req, result, prompt.tool_format).model_dump(mode="json"))
            return EventSourceResponse(chat_stream(req, gen, bridge, prompt.tool_format), sep="\n")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        authorize(request)
        async with counted(stats, "/v1/completions"):
            req = parse(p.CompletionRequest, await read_body(request, limits.max_body_bytes))
            served(req.model)
            refuse_unsupported(req)
            text = req.prompt if isinstance(req.prompt, str) else req.prompt[0]
            try:
                ids = engine.prompts.text(text)
            except ChatRequestError as err:
                raise ApiError(400, str(err), code="invalid_prompt", param="prompt") from None
            gen, bridge = generation(req, ids, stream=req.stream)
            echo = text if req.echo else ""
            if not req.stream:
                result = await settled(request, gen, bridge)
                stats.add(answered=1)
                choice = p.TextChoice(text=echo + result.text, finish_reason=result.finish_reason)
                return JSONResponse(p.Completion(id=p.new_id("cmpl-"), model=req.model, choices=[choice],
                                                 usage=p.usage(result.prompt_tokens, result.completion_tokens)).model_dump(mode="json"))
            return EventSourceResponse(text_stream(req, gen, bridge, echo), sep="\n")

    # --- Generations

    def refuse_unsupported(req: p.SamplingFields) -> None:
        problem = p.unsupported(req)
        if problem:
            raise ApiError(400, problem, code="unsupported")

    def generation(req: p.SamplingFields, ids: list[int], stream: bool) -> tuple[Generation, "_Bridge"]:
        bridge = _Bridge(asyncio.get_running_loop())
        gen = Generation(prompt=ids, sampling=sampling(req, limits, engine.vocab_size), on_done=bridge.done,
                         model=req.model, stops=req.stop_strings(), seed=req.seed, on_text=bridge.text if stream else None)
        try:
            engine.submit(gen)
        except QueueFull as full:
            raise ApiError(429, f"the server is busy ({full}); retry after {full.retry_after} s", "rate_limit_error",
                           code="queue_full", headers={"Retry-After": str(full.retry_after)}) from None
        except EngineClosed:
            raise ApiError(503, "the server is stopping", "server_error", code="stopping") from None
        return gen, bridge

    async def settled(request: Request, gen: Generation, bridge: "_Bridge") -> Result:
        """The finished generation of a non-streamed request; its client going away meanwhile
        stops it (_Disconnected)."""
        while True:
            try:
                kind, value = await asyncio.wait_for(bridge.queue.get(), timeout=POLL_S)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    engine.cancel(gen)
                    raise _Disconnected() from None
                continue
            if kind == "done":
                return ended_well(value)

    def ended_well(result: Result) -> Result:
        if result.ended == "shutdown":
            raise ApiError(503, "the server stopped before the answer was complete", "server_error", code="stopping")
        if result.ended == "failed":
            raise ApiError(500, f"generation failed ({result.error}); the server's log has the traceback", "server_error",
                           code="generation_failed")
        if result.ended == "disconnected":
            raise _Disconnected()
        return result

    def chat_answer(req: p.ChatCompletionRequest, result: Result, tool_format: str | None) -> p.ChatCompletion:
        calls = tool_calls_from_text(tool_format, result.text) if tool_format else None
        if calls:
            message = p.ChatMessage(content=None, tool_calls=[p.ToolCall(id=p.new_id("call_"), function=p.FunctionCall(
                name=name, arguments=arguments)) for name, arguments in calls])
        else:
            message = p.ChatMessage(content=result.text)
        choice = p.ChatChoice(message=message, finish_reason="tool_calls" if calls else result.finish_reason)
        return p.ChatCompletion(id=p.new_id("chatcmpl-"), model=req.model, choices=[choice],
                                usage=p.usage(result.prompt_tokens, result.completion_tokens))

    async def chat_stream(req: p.ChatCompletionRequest, gen: Generation, bridge: "_Bridge",
                          tool_format: str | None) -> AsyncIterator[dict[str, str]]:
        cid = p.new_id("chatcmpl-")

        def chunk(delta: p.Delta, finish: str | None = None, usage: p.Usage | None = None, choices: bool = True) -> dict[str, str]:
            listed = [p.ChunkChoice(delta=delta, finish_reason=finish)] if choices else []
            return {"data": p.chunk_json(p.ChatCompletionChunk(id=cid, model=req.model, choices=listed, usage=usage))}

        async def pieces() -> AsyncIterator[tuple[dict[str, str] | None, Result | None]]:
            yield chunk(p.Delta(role="assistant", content="")), None
            async for text, result in bridge.stream():
                if result is None:
                    yield chunk(p.Delta(content=text)), None
                    continue
                answer = chat_answer(req, result, tool_format).choices[0]
                if answer.message.tool_calls:
                    calls = [{"index": i, **call.model_dump(mode="json")} for i, call in enumerate(answer.message.tool_calls)]
                    yield chunk(p.Delta(tool_calls=calls)), None
                elif tool_format:  # the buffered answer of a request with tools that called none
                    yield chunk(p.Delta(content=result.text)), None
                usage = p.usage(result.prompt_tokens, result.completion_tokens)
                yield chunk(p.Delta(), answer.finish_reason), None
                if req.include_usage():
                    yield chunk(p.Delta(), usage=usage, choices=False), None
                yield None, result

        async for event in streamed(gen, pieces()):
            yield event

    async def text_stream(req: p.CompletionRequest, gen: Generation, bridge: "_Bridge", echo: str) -> AsyncIterator[dict[str, str]]:
        cid = p.new_id("cmpl-")

        def chunk(text: str, finish: str | None = None, usage: p.Usage | None = None, choices: bool = True) -> dict[str, str]:
            listed = [p.TextChoice(text=text, finish_reason=finish)] if choices else []
            return {"data": p.chunk_json(p.Completion(id=cid, model=req.model, choices=listed, usage=usage))}

        async def pieces() -> AsyncIterator[tuple[dict[str, str] | None, Result | None]]:
            if echo:
                yield chunk(echo), None
            async for text, result in bridge.stream():
                if result is None:
                    yield chunk(text), None
                    continue
                yield chunk("", result.finish_reason), None
                if req.include_usage():
                    yield chunk("", usage=p.usage(result.prompt_tokens, result.completion_tokens), choices=False), None
                yield None, result

        async for event in streamed(gen, pieces()):
            yield event

    async def streamed(gen: Generation, pieces: AsyncIterator[tuple[dict[str, str] | None, Result | None]]
                       ) -> AsyncIterator[dict[str, str]]:
        """A stream's events, then ``[DONE]``, counted once: answered, an error event (the
        server stopped, the generation failed), or disconnected when the client left first."""
        over = False
        try:
            async for event, result in pieces:
                if event is not None:
                    yield event
                    continue
                try:
                    ended_well(result)
                except _Disconnected:
                    return
                except ApiError as err:
                    over = True
                    stats.add(errors=1)
                    note_error(stats, "/v1 stream", err)
                    yield {"data": json.dumps(p.error_body(err.message, err.type, err.code), ensure_ascii=False)}
                    return
            over = True
            stats.add(answered=1)
            yield {"data": "[DONE]"}
        finally:
            if not over:
                engine.cancel(gen)
                stats.add(disconnected=1)

    return app


class _Bridge:
    """A generation's text and end, from the worker thread to the request's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def _put(self, item: tuple[str, Any]) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the loop has closed (the server stopped): nobody waits any more
            pass

    def text(self, piece: str) -> None:
        self._put(("text", piece))

    def done(self, result: Result) -> None:
        self._put(("done", result))

    async def stream(self) -> AsyncIterator[tuple[str, Result | None]]:
        """(text, None) for each piece, then ("", the Result)."""
        while True:
            kind, value = await self.queue.get()
            if kind == "done":
                yield "", value
                return
            yield value, None


class counted:
    """Counts a completion request in ``requests`` and, when it fails, once in rejected (429),
    disconnected or errors (any other error answer, logged once per kind a minute); the route
    counts its answers (a stream counts itself as it ends)."""

    def __init__(self, stats: Any, route: str):
        self.stats, self.route = stats, route

    async def __aenter__(self) -> None:
        self.stats.add(requests=1)

    async def __aexit__(self, kind: Any, err: BaseException | None, _tb: Any) -> bool:
        if err is None:
            return False
        if isinstance(err, _Disconnected):
            self.stats.add(disconnected=1)
            return False
        if isinstance(err, ApiError):
            self.stats.add(**({"rejected": 1} if err.status == 429 else {"errors": 1}))
            note_error(self.stats, self.route, err)
        elif isinstance(err, Exception):
            self.stats.add(errors=1)
        return False


def note_error(stats: Any, route: str, err: ApiError) -> None:
    """One ``log`` line per kind of error answer a minute, naming the route, status and code
    (never the request's text, which the error's message may quote)."""
    if err.code == "stopping":
        return  # the job's own Stop: its run_end says so
    if err.status == 429:
        kind, message = "429", "requests refused with 429: the queue was full (raise --queue, or send fewer at once)"
    else:
        kind = f"{err.status} {err.code or err.type}"
        message = f"{route}: HTTP {err.status} {err.code or err.type}"
    stats.problem(kind, "error" if err.status >= 500 else "warning", message)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) above ``limit`` bytes: by its Content-Length before reading, and
    while reading (a chunked body has none)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the request body is {declared} bytes; this server takes at most {limit}", code="body_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the request body is over {limit} bytes, the most this server takes", code="body_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def parse(model: type[BaseModel], body: bytes) -> Any:
    try:
        return model.model_validate_json(body or b"null")
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "body"
        kind = first.get("type", "")
        if kind == "json_invalid" or kind == "model_type":
            raise ApiError(400, "the request body is not a JSON object", code="invalid_json") from None
        raise ApiError(400, f"{where}: {first.get('msg', 'invalid')}", code="invalid_value", param=where) from None


def sampling(req: p.SamplingFields, limits: Limits, vocab_size: int) -> dict[str, Any]:
    """``generate``'s arguments for a request: its temperature, top_p and max_tokens, else the
    job's defaults (LLaMA-Factory's); max_tokens clamped to the limit; presence_penalty read
    as repetition_penalty (LLaMA-Factory's reading); logit_bias as a bias per token id."""
    defaults = limits.defaults
    wanted = getattr(req, "max_completion_tokens", None) or req.max_tokens or int(defaults["max_new_tokens"])
    temperature = 0.0 if req.do_sample is False else req.temperature
    settings = {"max_new_tokens": min(wanted, limits.max_tokens_limit)}
    settings.update({k: v for k, v in (("temperature", temperature), ("top_p", req.top_p)) if v is not None})
    kwargs = sampling_kwargs(settings, defaults)
    if req.presence_penalty:
        kwargs["repetition_penalty"] = float(req.presence_penalty)
    if req.logit_bias:
        bias: dict[tuple[int, ...], float] = {}
        for token, value in req.logit_bias.items():
            if not token.isdigit() or int(token) >= vocab_size:
                raise ApiError(400, f"logit_bias: {token!r} is not a token id of this model (0 to {vocab_size - 1})",
                               param="logit_bias")
            if value:
                bias[(int(token),)] = float(value)
        if bias:
            kwargs["sequence_bias"] = bias
    return kwargs
