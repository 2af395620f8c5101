"""``ftui serve``'s server process (ftui.runner.serve): the trained demo behind an OpenAI-compatible
API, driven with the ``openai`` client.

One server (a module fixture) serves the demo run's model and two LoRA adapters over it, with
a key, a queue of 8 and a max_tokens limit of 200; most tests share it and the last one stops
it. The routes' own rules (tools, body limits, 429) are tested on the app with a stand-in
engine, without a model.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from conftest import wait_for
from ftui.config.load import read_run_config
from ftui.rundir.event_reader import read_all
from ftui.rundir.paths import EVENTS_FILE, LAUNCH_FILE

QUESTION = "What is ftui?"
ANSWER = "ftui is a terminal dashboard for fine-tuning language models on GPU servers."
KEY = "sk-test-5f1c2a9e0b7d"
LIMIT = 200  # the server's max_tokens_limit
QUEUE = 8


# --- Starting a serve job as ftui serve does (interface 1: config.yaml + job.json, then start_run)


def write_job(job: Path, run: Path, **spec) -> Path:
    job.mkdir(parents=True, mode=0o700)
    cfg = read_run_config(run / "config.yaml").model_copy(update={"report_to": "none", "nproc_per_node": 1, "engine": "single"})
    cfg.save(job / "config.yaml", include_unsupported=False)
    body = {"job": "serve", "source": {"run": str(run), "checkpoint": None, "base": False}, "source_label": f"{run.name} final",
            "served_name": "demo", "adapters": [], "host": "127.0.0.1", "port": 0, "api_key_file": None, "queue_size": QUEUE,
            "max_tokens_limit": LIMIT, "max_body_bytes": 1 << 20,
            "generation": {"max_new_tokens": 512, "temperature": 0.95, "top_p": 0.7}, "device": "cpu",
            "created": time.time(), "run": str(run)}
    (job / "job.json").write_text(json.dumps({**body, **spec}))
    return job


def start(job: Path) -> None:
    from ftui.jobs.launch import start_run

    start_run(job, read_run_config(job / "config.yaml"), job="serve")


def events(job: Path) -> list[dict]:
    path = job / EVENTS_FILE
    return read_all(path) if path.is_file() else []


def first(job: Path, kind: str, timeout: float = 300.0, where=lambda e: True) -> dict:
    found: list[dict] = []
    assert wait_for(lambda: bool(found.extend(e for e in events(job) if e["event"] == kind and where(e)) or found)
                    or any(e["event"] == "run_end" for e in events(job)), timeout=timeout), (job / "train.log").read_text()[-3000:]
    assert found, f"the job ended before {kind}: {events(job)[-1]}; log: {(job / 'train.log').read_text()[-3000:]}"
    return found[0]


def job_processes(job: Path) -> list[psutil.Process]:
    sup = psutil.Process(json.loads((job / LAUNCH_FILE).read_text())["pid"])
    return [sup, *sup.children(recursive=True)]


def serving_process(job: Path) -> psutil.Process:
    return next(p for p in job_processes(job) if "ftui.runner" in p.cmdline() and "serve" in p.cmdline())


def make_adapter(base: Path, out: Path, seed: int) -> Path:
    """A LoRA adapter over the demo model with random weights (its B not zero): it changes the answers."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base)
    lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj", "down_proj"],
                                            init_lora_weights=False))
    lora.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def server(demo_run, tmp_path_factory):
    """The demo run served with a key and two adapters (demo-a, demo-b): (job dir, base url)."""
    root = tmp_path_factory.mktemp("serve")
    key_file = root / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    adapters = [{"name": f"demo-{n}", "path": str(make_adapter(demo_run / "final", root / f"lora-{n}", seed))}
                for n, seed in (("a", 1), ("b", 2))]
    job = write_job(root / "serve" / "job", demo_run, api_key_file=str(key_file), adapters=adapters)
    start(job)
    ready = first(job, "serve_ready")
    yield job, ready["url"]
    if not any(e["event"] == "run_end" for e in events(job)):
        from ftui.ops.control import stop

        stop(job)
        wait_for(lambda: any(e["event"] == "run_end" for e in events(job)), timeout=60)


def client(url: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=120)


def stop_ids(run: Path) -> dict[str, float]:
    """logit_bias that bans the demo's end of answer (<|im_end|>): its answers then run to the length limit."""
    tok = json.loads((run / "final" / "tokenizer.json").read_text())
    eos = json.loads((run / "final" / "tokenizer_config.json").read_text())["eos_token"]
    return {str(t["id"]): -100 for t in tok["added_tokens"] if t["content"] == eos}


def server_run(job: Path) -> Path:
    return Path(json.loads((job / "job.json").read_text())["source"]["run"])


def last_stats(job: Path) -> dict:
    """The newest serve_stats (all zeros before the first, written 2 s after the start)."""
    stats = [e for e in events(job) if e["event"] == "serve_stats"]
    return stats[-1] if stats else {"disconnected": 0, "answered": 0, "generated_tokens": 0}


# --- The issue's "Done when", on the trained demo


def test_the_server_starts_with_its_ids_and_needs_a_key(server):
    job, url = server
    start_event = next(e for e in events(job) if e["event"] == "job_start")
    ready = next(e for e in events(job) if e["event"] == "serve_ready")
    assert start_event["job"] == "serve" and start_event["models"] == ["demo", "demo-a", "demo-b"]
    assert ready["key"] is True and ready["host"] == "127.0.0.1" and ready["port"] > 0
    assert ready["url"] == f"http://127.0.0.1:{ready['port']}/v1" == url
    assert [m.id for m in client(url).models.list().data] == ["demo", "demo-a", "demo-b"]


def test_greedy_answer_is_the_sentence_the_demo_learnt(server):
    _job, url = server
    reply = client(url).chat.completions.create(model="demo", messages=[{"role": "user", "content": QUESTION}], temperature=0)
    assert reply.choices[0].message.content == ANSWER
    assert reply.choices[0].finish_reason == "stop" and reply.model == "demo" and reply.id.startswith("chatcmpl-")
    assert reply.usage.completion_tokens > 0 and reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_streaming_yields_the_same_text_in_chunks(server):
    _job, url = server
    chunks = list(client(url).chat.completions.create(model="demo", messages=[{"role": "user", "content": QUESTION}],
                                                      temperature=0, stream=True))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == ANSWER and len(pieces) > 3
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)


def test_a_stop_string_cuts_the_answer_before_it_streamed_or_not(server):
    _job, url = server
    ask = client(url)
    messages = [{"role": "user", "content": QUESTION}]
    reply = ask.chat.completions.create(model="demo", messages=messages, temperature=0, stop=["dashboard", "nowhere"])
    assert reply.choices[0].message.content == "ftui is a terminal " and reply.choices[0].finish_reason == "stop"
    chunks = list(ask.chat.completions.create(model="demo", messages=messages, temperature=0, stop="dash", stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "ftui is a terminal "


def test_a_wrong_or_missing_key_gets_401_and_health_needs_none(server):
    _job, url = server
    with pytest.raises(openai.AuthenticationError):
        client(url, "sk-wrong").chat.completions.create(model="demo", messages=[{"role": "user", "content": QUESTION}])
    missing = httpx.post(url + "/chat/completions", json={"model": "demo", "messages": [{"role": "user", "content": QUESTION}]})
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(url + "/models").status_code == 401
    health = httpx.get(url.removesuffix("/v1") + "/health")
    assert health.status_code == 200 and health.json() == {"status": "ok"}


def test_max_tokens_of_ten_to_the_ninth_is_clamped_to_the_limit(server, demo_run):
    _job, url = server
    reply = client(url).chat.completions.create(model="demo", messages=[{"role": "user", "content": QUESTION}], temperature=0,
                                                max_tokens=10**9, logit_bias=stop_ids(demo_run))
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == LIMIT


def test_a_client_that_disconnects_stops_its_generation(server, demo_run):
    """A streaming client leaves after three events of an answer that would run to the limit:
    its generation ends (the disconnected counter rises, nothing is generating, and fewer than
    the limit's tokens were made). The first disconnect settles the counters (every earlier
    request is in the event that shows it), the second is measured from there."""
    job, url = server
    body = {"model": "demo", "messages": [{"role": "user", "content": QUESTION}], "temperature": 0, "stream": True,
            "max_tokens": LIMIT, "logit_bias": stop_ids(demo_run)}

    def leave_early() -> dict:
        seen = last_stats(job)["disconnected"]
        with httpx.stream("POST", url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"},
                          timeout=60) as r:
            assert r.status_code == 200
            data = []
            for line in r.iter_lines():
                data += [line] if line.startswith("data:") else []
                if len(data) == 3:
                    break  # and the connection closes
        return first(job, "serve_stats", timeout=60,
                     where=lambda e: e["disconnected"] > seen and e["active"] == 0 and e["queued"] == 0)

    before = leave_early()
    after = leave_early()
    assert after["disconnected"] == before["disconnected"] + 1 and after["answered"] == before["answered"]
    assert 0 < after["generated_tokens"] - before["generated_tokens"] < LIMIT  # it stopped before its length limit


def test_a_hundred_concurrent_requests_get_answers_or_429_and_memory_stays_bounded(server):
    job, url = server
    rss_before = serving_process(job).memory_info().rss

    async def flood() -> list[httpx.Response]:
        body = {"model": "demo", "messages": [{"role": "user", "content": QUESTION}], "temperature": 0}
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=300, limits=limits) as http:
            return await asyncio.gather(*(http.post(url + "/chat/completions", json=body) for _ in range(100)))

    replies = asyncio.run(flood())
    codes = [r.status_code for r in replies]
    assert set(codes) <= {200, 429} and codes.count(200) >= 1 and codes.count(429) >= 1, codes
    assert all(r.json()["choices"][0]["message"]["content"] == ANSWER for r in replies if r.status_code == 200)
    assert all(int(r.headers["retry-after"]) >= 1 and r.json()["error"]["type"] == "rate_limit_error"
               for r in replies if r.status_code == 429)
    again = client(url).chat.completions.create(model="demo", messages=[{"role": "user", "content": QUESTION}], temperature=0)
    assert again.choices[0].message.content == ANSWER  # still serving
    assert serving_process(job).memory_info().rss - rss_before < 300 * 2**20
    assert first(job, "serve_stats", timeout=60, where=lambda e: e["rejected"] >= codes.count(429))


def test_each_lora_adapter_answers_under_its_own_name(server):
    _job, url = server
    ask = client(url)

    def answer(model: str) -> str:
        reply = ask.chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTION}], temperature=0,
                                            max_tokens=30)
        assert reply.model == model
        return reply.choices[0].message.content

    a, b = answer("demo-a"), answer("demo-b")
    assert ANSWER not in (a, b) and a != b
    assert answer("demo") == ANSWER  # the base answers again with the adapters off
    with pytest.raises(openai.NotFoundError, match="demo-a"):
        ask.chat.completions.create(model="demo-c", messages=[{"role": "user", "content": QUESTION}])


def test_tools_need_a_named_chat_template(server):
    """The demo renders with its tokenizer's own template: no tool-call format is known, so tools are refused."""
    _job, url = server
    with pytest.raises(openai.BadRequestError, match="without tools"):
        client(url).chat.completions.create(model="demo", messages=[{"role": "user", "content": QUESTION}], tools=TOOLS)


def test_the_same_seed_gives_the_same_sampled_answer(server):
    _job, url = server
    ask = client(url)

    def sampled(seed: int) -> str:
        return ask.completions.create(model="demo", prompt="ftui", temperature=1.0, max_tokens=12, seed=seed).choices[0].text

    assert sampled(7) == sampled(7)


def test_the_job_listens_on_its_one_port_on_loopback_and_keeps_no_key(server):
    job, url = server
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    listening = {(c.laddr.ip, c.laddr.port) for p in job_processes(job) for c in p.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN}
    assert listening == {("127.0.0.1", port)}
    for path in job.iterdir():
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path.name


def test_stop_ends_the_server_gracefully(server):
    """The last test of the module's server: Stop (ftui.ops.control.stop, SIGTERM) ends it."""
    from ftui.ops.control import stop

    job, url = server
    body = {"model": "demo", "messages": [{"role": "user", "content": QUESTION}], "temperature": 0, "stream": True,
            "max_tokens": LIMIT, "logit_bias": stop_ids(server_run(job))}
    with httpx.stream("POST", url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))  # a generation in flight
        stop(job)
        rest = [line.removeprefix("data: ") for line in lines if line.startswith("data:")]
    assert json.loads(rest[-1])["error"]["code"] == "stopping"  # cut short, said so
    assert sum(1 for line in rest if '"content"' in line) < LIMIT
    end = first(job, "run_end", timeout=120)
    assert end["status"] == "stopped" and end["reason"].startswith("stopped: served")
    with pytest.raises(httpx.ConnectError):
        httpx.get(url.removesuffix("/v1") + "/health")


def test_a_bind_beyond_loopback_without_a_key_is_refused(demo_run, tmp_path, monkeypatch):
    for name in ("FTUI_API_KEY", "API_KEY"):
        monkeypatch.delenv(name, raising=False)
    job = write_job(tmp_path / "serve" / "open", demo_run, host="0.0.0.0")
    start(job)
    end = first(job, "run_end", timeout=120)
    assert end["status"] == "failed" and "--api-key-file" in end["reason"]
    assert not any(e["event"] in ("job_start", "serve_ready") for e in events(job))


# --- The app's own rules, on a stand-in engine (no model)

TOOL_TEXT = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "f", "description": "a function",
                                            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]


class FakeEngine:
    """build_app's engine, answering every request at once with ``text`` (in two streamed
    pieces); ``full``: its queue is full. Prompts: tools read in Qwen's format."""

    def __init__(self, text: str = "hello world", full: bool = False, hold: bool = False):
        from types import SimpleNamespace

        from ftui.runner.serve_engine import ServeStats
        from ftui.runner.serve_prompts import ChatPrompt

        self.text, self.full, self.hold, self.submitted, self.cancelled = text, full, hold, [], []
        self.stats = ServeStats()
        self.vocab_size = 100
        self.prompts = SimpleNamespace(chat=lambda messages, tools: ChatPrompt([1, 2, 3], "qwen" if tools else None),
                                       text=lambda prompt: [1, 2])

    def submit(self, gen) -> None:
        from ftui.runner.serve_engine import QueueFull, Result

        if self.full:
            raise QueueFull(3)
        self.submitted.append(gen)
        if self.hold:
            return  # a generation that never ends by itself
        if gen.on_text is not None:
            for piece in (self.text[:5], self.text[5:]):
                gen.on_text(piece)
        gen.on_done(Result(text=self.text, prompt_tokens=3, completion_tokens=7))

    def cancel(self, gen) -> None:
        self.cancelled.append(gen)
        gen.end("disconnected")


@pytest.fixture
def app_client():
    """(an openai client and the raw HTTP client) over build_app(engine, ...) in this process."""
    from starlette.testclient import TestClient

    from ftui.runner.serve_app import Limits, build_app

    opened = []

    def make(engine: FakeEngine, key: str | None = "k", **limits):
        http = TestClient(build_app(engine, ["m", "m-lora"], key, Limits(**{"max_tokens_limit": 64, "max_body_bytes": 2048, **limits})),
                          base_url="http://testserver")
        opened.append(http)
        return openai.OpenAI(base_url="http://testserver/v1", api_key=key or "none", http_client=http, max_retries=0), http

    yield make
    for http in opened:
        http.close()


def test_a_tool_call_in_the_answer_comes_back_as_openai_tool_calls(app_client):
    ask, _http = app_client(FakeEngine(TOOL_TEXT))
    reply = ask.chat.completions.create(model="m", messages=[{"role": "user", "content": "call f"}], tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function" and call.function.name == "f"
    assert json.loads(call.function.arguments) == {"a": 1}
    streamed = list(ask.chat.completions.create(model="m", messages=[{"role": "user", "content": "call f"}], tools=TOOLS, stream=True))
    calls = [tc for c in streamed if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [("f", {"a": 1})]
    assert streamed[-1].choices[0].finish_reason == "tool_calls"
    plain = ask.chat.completions.create(model="m", messages=[{"role": "user", "content": "call f"}])  # no tools: text
    assert plain.choices[0].message.content == TOOL_TEXT and plain.choices[0].finish_reason == "stop"


def test_completions_answer_raw_text_streamed_or_not(app_client):
    ask, _http = app_client(FakeEngine("hello world"))
    reply = ask.completions.create(model="m-lora", prompt="say", echo=True)
    assert reply.choices[0].text == "sayhello world" and reply.id.startswith("cmpl-") and reply.model == "m-lora"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (3, 7)
    chunks = list(ask.completions.create(model="m", prompt="say", stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "hello world"
    assert chunks[-1].usage.total_tokens == 10 and all(c.object == "text_completion" for c in chunks)


def test_bodies_over_the_limit_get_413_before_the_engine_sees_them(app_client):
    engine = FakeEngine()
    _ask, http = app_client(engine)
    headers = {"Authorization": "Bearer k", "Content-Type": "application/json"}
    big = json.dumps({"model": "m", "prompt": "x" * 4000}).encode()
    declared = http.post("/v1/completions", content=big, headers=headers)
    chunked = http.post("/v1/completions", content=iter([big[:1500], big[1500:]]), headers=headers)  # no Content-Length
    for reply in (declared, chunked):
        assert reply.status_code == 413 and reply.json()["error"]["code"] == "body_too_large"
    assert engine.submitted == [] and engine.stats.get("errors") == 2


def test_a_full_queue_answers_429_with_retry_after(app_client):
    ask, http = app_client(FakeEngine(full=True))
    with pytest.raises(openai.RateLimitError):
        ask.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    reply = http.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                      headers={"Authorization": "Bearer k"})
    assert reply.status_code == 429 and reply.headers["retry-after"] == "3"


def test_sampling_settings_are_taken_clamped_or_refused_by_name(app_client):
    engine = FakeEngine()
    ask, _http = app_client(engine)
    messages = [{"role": "user", "content": "hi"}]
    ask.chat.completions.create(model="m", messages=messages, temperature=0, max_tokens=10**9, presence_penalty=0.5,
                                logit_bias={"7": -100}, stop=["x", "y"], seed=3, user="someone", extra_body={"metadata": {"a": 1}})
    gen = engine.submitted[-1]
    assert gen.sampling == {"max_new_tokens": 64, "do_sample": False, "repetition_penalty": 0.5, "sequence_bias": {(7,): -100.0}}
    assert (gen.stops, gen.seed, gen.model) == (["x", "y"], 3, "m")
    ask.chat.completions.create(model="m", messages=messages)
    assert engine.submitted[-1].sampling == {"max_new_tokens": 64, "do_sample": True, "temperature": 0.95, "top_p": 0.7}
    for bad, says in (({"n": 2}, "n must be 1"), ({"frequency_penalty": 0.5}, "frequency_penalty"),
                      ({"logprobs": True}, "logprobs"), ({"logit_bias": {"100": 1}}, "logit_bias"),
                      ({"stop": ["a", "b", "c", "d", "e"]}, "stop"), ({"temperature": 3}, "temperature")):
        with pytest.raises(openai.BadRequestError, match=says):
            ask.chat.completions.create(model="m", messages=messages, **bad)
    with pytest.raises(openai.NotFoundError, match="m-lora"):
        ask.chat.completions.create(model="other", messages=messages)


def test_errors_are_openais_shape_and_only_v1_needs_the_key(app_client):
    _ask, http = app_client(FakeEngine())
    assert http.get("/health").json() == {"status": "ok"}
    assert http.get("/v1/models").status_code == 401
    assert http.get("/v1/models", headers={"Authorization": "Bearer k2"}).json()["error"]["code"] == "invalid_api_key"
    assert [m["id"] for m in http.get("/v1/models", headers={"Authorization": "Bearer k"}).json()["data"]] == ["m", "m-lora"]
    bad = http.post("/v1/chat/completions", content=b"{not json", headers={"Authorization": "Bearer k"})
    assert bad.status_code == 400 and set(bad.json()["error"]) == {"message", "type", "param", "code"}
    assert http.get("/nowhere").json()["error"]["code"] == "not_found"
    assert "access-control-allow-origin" not in http.get("/health", headers={"Origin": "http://evil.example"}).headers
    _ask, open_http = app_client(FakeEngine(), key=None)
    assert open_http.get("/v1/models").status_code == 200


def test_a_waiting_client_that_goes_away_cancels_its_generation():
    """A non-streamed request's client leaves while its answer is being generated (here: one
    that never ends): the app notices (it polls the connection) and cancels the generation."""
    import threading

    import uvicorn

    from ftui.runner.serve_app import Limits, build_app

    engine = FakeEngine(hold=True)
    server = uvicorn.Server(uvicorn.Config(build_app(engine, ["m"], None, Limits()), host="127.0.0.1", port=0,
                                           log_config=None, lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: server.started, timeout=60)
        port = server.servers[0].sockets[0].getsockname()[1]
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                       timeout=httpx.Timeout(30, read=0.5))
        assert wait_for(lambda: engine.cancelled == engine.submitted != [], timeout=60)
        assert wait_for(lambda: engine.stats.get("disconnected") == 1, timeout=10)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_a_runs_chat_template_renders_the_prompt_and_describes_the_tools():
    """A run with a named template (qwen here, on the demo's tokenizer) renders as LLaMA-Factory's
    API does: the template's turns, the tools in its system prompt, the answer read in its tool
    format; a model with only its tokenizer's template refuses tools."""
    from types import SimpleNamespace

    from ftui.config.load import demo_config
    from ftui.data.openai_chat import ChatRequestError
    from ftui.runner.model import load_tokenizer
    from ftui.runner.serve_prompts import Prompts

    cfg = demo_config(template="qwen")
    demo_tokenizer = load_tokenizer(cfg)  # fixed up for the template, as ChatModel loads a run's
    prompts = Prompts(SimpleNamespace(tokenizer=demo_tokenizer, model=None), cfg)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
    plain = prompts.chat(messages, None)
    assert plain.tool_format is None and demo_tokenizer.decode(plain.ids) == (
        f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n")
    tooled = prompts.chat(messages, TOOLS)
    text = demo_tokenizer.decode(tooled.ids)
    assert tooled.tool_format == "qwen" and "<tools>" in text and '"name": "f"' in text and text.endswith("<|im_start|>assistant\n")
    own = Prompts(SimpleNamespace(tokenizer=SimpleNamespace(chat_template="{{ x }}"), model=None), demo_config())
    with pytest.raises(ChatRequestError, match="without tools"):
        own.chat(messages, TOOLS)


# --- The engine's parts


def test_stop_strings_cut_the_text_and_what_may_begin_one_is_held_back():
    from ftui.runner.serve_batch import TextOut

    sent: list[str] = []
    out = TextOut(["END"], sent.append)
    for piece in ("abc E", "N", "D more"):
        out.add(piece)
    assert (sent, out.text, out.hit) == (["abc "], "abc ", True)
    sent.clear()
    out = TextOut(["END"], sent.append)
    for piece in ("x E", "Z"):
        out.add(piece)
    out.finish()
    assert sent == ["x ", "EZ"] and not out.hit


def test_the_queue_holds_queue_size_behind_the_one_generating():
    from types import SimpleNamespace

    from ftui.runner.serve_engine import Engine, EngineClosed, Generation, ModelSwitch, QueueFull

    ended: list[str] = []
    engine = Engine(SimpleNamespace(tokenizer=[0] * 10), ModelSwitch(None, "m"), lambda *a, **k: [], None, queue_size=2)
    gens = [Generation([1], {}, on_done=lambda r: ended.append(r.ended)) for _ in range(3)]
    for gen in gens:  # the worker is not started: the first would be generating, two wait
        engine.submit(gen)
    with pytest.raises(QueueFull) as full:
        engine.submit(Generation([1], {}, on_done=ended.append))
    assert full.value.retry_after >= 1
    engine.cancel(gens[1])
    assert ended == ["disconnected"] and engine.stats.get("queued") == 2
    engine.close()
    assert ended == ["disconnected", "shutdown", "shutdown"]
    with pytest.raises(EngineClosed):
        engine.submit(gens[0])


def test_the_key_comes_from_its_file_else_the_environment(tmp_path):
    from ftui.runner.serve import ServeError, is_loopback, read_key

    key_file = tmp_path / "key"
    key_file.write_text("  s3cret\n")
    assert read_key(str(key_file), {"FTUI_API_KEY": "env"}) == "s3cret"
    assert read_key(None, {"FTUI_API_KEY": " a ", "API_KEY": "b"}) == "a"
    assert read_key(None, {"FTUI_API_KEY": "", "API_KEY": "b"}) == "b"
    assert read_key(None, {}) is None
    key_file.write_text("\n")
    with pytest.raises(ServeError, match="empty"):
        read_key(str(key_file), {})
    with pytest.raises(ServeError, match="--api-key-file"):
        read_key(str(tmp_path / "missing"), {})
    assert [is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "10.0.0.1", "example.com")] == [
        True, True, True, False, False, False]


def test_a_port_in_use_is_said_with_what_to_do():
    from ftui.runner.serve import ServeError, bind

    taken = bind("127.0.0.1", 0)
    taken.listen()
    try:
        port = taken.getsockname()[1]
        with pytest.raises(ServeError, match=f"port {port} on 127.0.0.1 is in use; choose another with --port"):
            bind("127.0.0.1", port)
    finally:
        taken.close()


def test_job_json_settings_out_of_bounds_are_said_by_name():
    from ftui.runner.serve import ServeError, Settings

    assert Settings.of({}).port == 8000 and Settings.of({"port": 0, "queue_size": 0}).queue_size == 0
    assert (Settings.of({}).max_batch, Settings.of({"max_batch": 1}).max_batch) == (8, 1)
    for spec, says in (({"port": 70000}, "port"), ({"queue_size": -1}, "queue_size"), ({"max_batch": 0}, "max_batch"), ({"max_tokens_limit": "9"}, "max_tokens_limit"),
                       ({"generation": {"temperature": "hot"}}, "temperature"), ({"host": ""}, "host")):
        with pytest.raises(ServeError, match=says):
            Settings.of(spec)


def test_without_the_serve_extra_the_job_says_what_to_install(tmp_path, monkeypatch):
    import importlib.util

    from ftui.runner import serve

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sse_starlette" else real(name, *a))
    status, reason = serve.serve(tmp_path, None, None, None, None)
    assert status == "failed" and "pip install 'ftui[serve]'" in reason and "sse-starlette" in reason
