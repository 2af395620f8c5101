"""The OpenAI API's request and response shapes that ``ftui serve`` speaks (pydantic models).

Requests: ``/v1/chat/completions`` and ``/v1/completions`` bodies as OpenAI's clients send
them. Fields the server has no use for (``user``, ``tool_choice``, ``metadata``, ...) are
ignored, as clients send many; fields that would change the answer and are not implemented
(``n`` > 1, ``logprobs``, ``frequency_penalty``, ``suffix``, ...) are refused by name
(:func:`unsupported`). LLaMA-Factory's own ``do_sample`` is taken (false: greedy), and its
reading of ``presence_penalty`` as transformers' ``repetition_penalty``.

Responses: ids ``chatcmpl-<hex>`` / ``cmpl-<hex>``, ``created`` in unix seconds, ``model``
echoing the requested id, ``usage`` in tokens, ``finish_reason`` stop | length | tool_calls;
streamed as ``chat.completion.chunk`` / ``text_completion`` chunks (the chat's first delta
carries the role), a last chunk with the finish reason, then ``[DONE]``. Errors:
``{"error": {"message", "type", "param", "code"}}``. Messages are English, as the protocol's are.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

MAX_STOP = 4  # OpenAI's limit on stop sequences
FinishReason = Literal["stop", "length", "tool_calls"]


class SamplingFields(BaseModel):
    """The generation settings both endpoints take (None: the server's default)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    stop: Union[str, list[str], None] = None
    seed: int | None = None
    n: int | None = 1
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    do_sample: bool | None = None  # LLaMA-Factory's: false is greedy whatever the temperature

    def stop_strings(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in stops if s]

    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.get("include_usage"))


class ChatCompletionRequest(SamplingFields):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    max_completion_tokens: int | None = Field(None, ge=1)  # newer clients' name for max_tokens
    logprobs: bool | None = None
    top_logprobs: int | None = None


class CompletionRequest(SamplingFields):
    prompt: Union[str, list[str]]
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = None
    best_of: int | None = None


def unsupported(request: SamplingFields) -> str | None:
    """Why the request asks for something this server does not do (None: it does not)."""
    if request.n not in (None, 1):
        return "n must be 1: this server generates one answer per request"
    if len(request.stop_strings()) > MAX_STOP:
        return f"stop takes at most {MAX_STOP} sequences"
    if request.frequency_penalty:
        return "frequency_penalty is not supported; leave it out or 0 (presence_penalty is read as repetition_penalty)"
    if request.presence_penalty is not None and request.presence_penalty < 0:
        return "presence_penalty is read as transformers' repetition_penalty (as LLaMA-Factory does) and must not be negative"
    if request.logit_bias and any(not -100.0 <= v <= 100.0 for v in request.logit_bias.values()):
        return "logit_bias values must be between -100 and 100"
    if isinstance(request, ChatCompletionRequest):
        if request.logprobs or request.top_logprobs:
            return "logprobs are not supported; leave logprobs and top_logprobs out"
    if isinstance(request, CompletionRequest):
        if request.suffix:
            return "suffix is not supported"
        if request.logprobs:
            return "logprobs are not supported"
        if request.best_of not in (None, 1):
            return "best_of must be 1"
        if isinstance(request.prompt, list) and len(request.prompt) != 1:
            return "prompt must be one string (or a list of one)"
    return None


# --- Responses


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


def usage(prompt_tokens: int, completion_tokens: int) -> Usage:
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens)


class FunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessage
    finish_reason: FinishReason
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChoice]
    usage: Usage


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # each call with its "index" (a stream's shape)


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: FinishReason | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


class TextChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: FinishReason | None = None
    logprobs: None = None


class Completion(BaseModel):
    """A /v1/completions answer, and (object text_completion too) each of its stream's chunks."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[TextChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "ftui"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


def new_id(prefix: str) -> str:
    """``chatcmpl-<hex>``, ``cmpl-<hex>``, ``call_<hex>``: OpenAI's id shapes."""
    return prefix + uuid.uuid4().hex


def chunk_json(chunk: BaseModel) -> str:
    """A stream chunk as its SSE data line's JSON (absent optional fields left out, as OpenAI does;
    a chunk's finish_reason stays, null until the last)."""
    data = chunk.model_dump(mode="json", exclude_none=True)
    for choice, model in zip(data.get("choices", []), getattr(chunk, "choices", [])):
        choice["finish_reason"] = model.finish_reason
        choice["logprobs"] = None
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def error_body(message: str, type_: str = "invalid_request_error", code: str | None = None, param: str | None = None) -> dict:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
