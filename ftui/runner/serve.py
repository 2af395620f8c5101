"""The serve job: ``python -m ftui.runner serve JOB_DIR``, an OpenAI-compatible API for one model.

JOB_DIR (``RUN/serve/ID``, or ``RUNS_ROOT/serve/ID`` for a ``--model`` outside a run) is laid out
as the other jobs' (config.yaml: the run's config; job.json: the model source, the served names
and LoRA adapters, host, port, key file, bounds, max_batch, generation defaults). In order:

1. The key: job.json's ``api_key_file`` (its text, stripped), else the
   environment's ``FTUI_API_KEY``, else ``API_KEY`` (LLaMA-Factory's). The key is never written
   anywhere. A host that is not a loopback address without a key is refused.
2. The port is bound (by uvicorn's ``Config.bind_socket``) before the model loads, so a port in
   use fails in a second with a message saying what to do (port 0: any free one, the real one
   in ``serve_ready``); uvicorn then serves on that socket.
3. The model loads once, as the chat worker loads it (``ChatModel``: a run's final/, a
   checkpoint, its base, or a model directory with an adapter); more LoRA adapters load over
   the same base under their own ids (peft's ``load_adapter``).
4. uvicorn serves the app (``ftui.runner.serve_app``) in this thread until a Stop: ftui's
   StopRequest (SIGTERM, which run_job installs) owns the signals, not uvicorn; the server
   polls it, stops the generations in flight and the queue, and shuts down gracefully;
   ``run_end`` says ``stopped: served N requests``.

Events: ``job_start`` (with host, port, models), ``serve_ready`` once listening (url, host,
port, models, key: whether requests need one), ``serve_stats`` at most every 2 s while something
changes and once at the end (``ftui.runner.serve_engine.ServeStats``' counters, tokens_per_s over
the last window, uptime_s), ``log`` for failed requests (once per kind a minute, no request text).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import importlib.util
import ipaddress
import json
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.rundir.event_writer import EventWriter
from ftui.rundir.paths import JOB_SPEC_FILE
from ftui.runner.engines import DistInfo
from ftui.runner.faults import StopRequest
from ftui.runner.job import run_job

KEY_ENV = ("FTUI_API_KEY", "API_KEY")  # ftui's, then LLaMA-Factory's
SERVER_PACKAGES = (("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("sse-starlette", "sse_starlette"))  # the serve extra
KEY_FILE_MAX = 64 * 1024
STATS_EVERY_S = 2.0
SHUTDOWN_GRACE_S = 10.0  # uvicorn's wait for open connections once the generations are stopped
GENERATION_DEFAULTS = {"max_new_tokens": 512, "temperature": 0.95, "top_p": 0.7}  # LLaMA-Factory's


class ServeError(Exception):
    """A serve job that cannot start; the message says what to do."""


def main(argv: list[str] | None = None) -> int:
    return run_job("serve", serve, sys.argv[1:] if argv is None else argv)


def serve(job_dir: Path, cfg: RunConfig, info: DistInfo, writer: EventWriter | None, stop: StopRequest,
          resume: Path | None = None) -> tuple[str, str]:
    try:
        missing = [name for name, module in SERVER_PACKAGES if importlib.util.find_spec(module) is None]
        if missing:
            raise ServeError(_("ftui serve needs {packages}: pip install 'ftui[serve]' (or pip install {packages})").format(
                packages=" ".join(missing)))
        spec = read_spec(job_dir)
        settings = Settings.of(spec)
        key = read_key(spec.get("api_key_file"), os.environ)
        if key is None and not is_loopback(settings.host):
            raise ServeError(_("serving on {host}, an address other machines can reach, needs an API key: give "
                               "--api-key-file FILE (or set FTUI_API_KEY where ftui serve runs), or serve on 127.0.0.1")
                             .format(host=settings.host))
        warn_key_file(spec.get("api_key_file"), writer)
        sock = bind(settings.host, settings.port)
    except ServeError as err:
        print("[ftui] " + str(err), file=sys.stderr, flush=True)
        return "failed", str(err)
    with contextlib.closing(sock):
        return serve_on(sock, job_dir, cfg, spec, settings, key, writer, stop)


def serve_on(sock: socket.socket, job_dir: Path, cfg: RunConfig, spec: dict[str, Any], settings: "Settings",
             key: str | None, writer: EventWriter | None, stop: StopRequest) -> tuple[str, str]:
    import uvicorn

    from ftui.runner.backends import backend
    from ftui.runner.chat import ChatError
    from ftui.runner.serve_app import Limits, build_app
    from ftui.runner.serve_engine import Engine
    from ftui.runner.serve_prompts import Prompts

    generate = backend(settings.generation.get("infer_backend"))  # an unknown backend is said before the model loads
    try:
        loaded, switch = load_models(spec, settings)
    except (ChatError, ServeError) as err:
        print("[ftui] " + str(err), file=sys.stderr, flush=True)
        return "failed", str(err)
    if stop.requested:
        return "stopped", _("stopped before serving")
    port = sock.getsockname()[1]
    events = LockedEvents(writer)
    events.write("job_start", run_id=job_dir.name, job="serve", source=spec.get("source_label", loaded.label),
                 model=loaded.label, precision=str(loaded.model.dtype).removeprefix("torch."), device=str(loaded.device),
                 world_size=1, host=settings.host, port=port, models=switch.ids,
                 total_params=sum(p.numel() for p in loaded.model.parameters()))
    engine = Engine(loaded, switch, generate, Prompts(loaded, cfg), settings.queue_size, max_batch=settings.max_batch)
    limits = Limits(settings.max_tokens_limit, settings.max_body_bytes,
                    {k: settings.generation.get(k, v) for k, v in GENERATION_DEFAULTS.items()})
    app = build_app(engine, switch.ids, key, limits)
    reporter = StatsReporter(engine.stats, events)

    def ready() -> None:
        events.write("serve_ready", url=f"http://{url_host(settings.host)}:{port}/v1", host=settings.host, port=port,
                     models=switch.ids, key=key is not None)

    config = uvicorn.Config(app, host=settings.host, port=port, log_config=None, access_log=False, server_header=False,
                            lifespan="off", ws="none", timeout_graceful_shutdown=int(SHUTDOWN_GRACE_S),
                            limit_concurrency=connection_limit(settings.queue_size))
    server = serve_server(config, stop, on_ready=ready, on_stop=lambda: engine.close(timeout=0))
    engine.start()
    reporter.start()
    try:
        server.run(sockets=[sock])
    except OSError as err:  # listen() lost the port to another socket bound beside ours (SO_REUSEADDR)
        if err.errno != errno.EADDRINUSE:
            raise
        return "failed", in_use(port, settings.host)
    finally:
        engine.close()
        reporter.finish()
    served = engine.stats.get("answered")
    if not stop.requested:
        return "failed", _("the server ended without a Stop after {n} answered requests; the job's log (train.log) says why"
                           ).format(n=served)
    return "stopped", _("stopped: served {n} requests").format(n=served)


def connection_limit(queue_size: int) -> int:
    """Connections served at once (uvicorn answers 503 beyond): with the body limit, a bound on
    the memory that bodies being read can take, far above what the queue admits (the rest get 429)."""
    return max(256, 4 * (queue_size + 1))


def serve_server(config: Any, stop: StopRequest, on_ready: Callable[[], None], on_stop: Callable[[], None]) -> Any:
    """uvicorn's Server, with ftui's StopRequest owning SIGTERM and SIGINT (uvicorn would
    replace run_job's handlers for its run): the request is polled every tick instead (uvicorn
    ticks every 0.1 s), ``on_stop`` ends the generations, then uvicorn shuts down gracefully;
    ``on_ready`` once listening."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                on_ready()

        async def on_tick(self, counter: int) -> bool:
            if stop.requested and not self.should_exit:
                print("[ftui] " + _("stopping: the generations in flight end now"), file=sys.stderr, flush=True)
                on_stop()
                self.should_exit = True
            return await super().on_tick(counter)

    return Server(config)


# --- The job's settings and key


class Settings:
    """job.json's serving settings, checked (job.json is written by ftui serve, but read as untrusted)."""

    def __init__(self, host: str, port: int, queue_size: int, max_tokens_limit: int, max_body_bytes: int,
                 generation: dict[str, Any], device: str, max_batch: int = 8):
        self.host, self.port, self.queue_size, self.max_batch = host, port, queue_size, max_batch
        self.max_tokens_limit, self.max_body_bytes = max_tokens_limit, max_body_bytes
        self.generation, self.device = generation, device

    @classmethod
    def of(cls, spec: dict[str, Any]) -> "Settings":
        def number(name: str, default: int, low: int, high: int) -> int:
            value = spec.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ServeError(_("job.json's {key} is {value}; expected a whole number from {low} to {high}").format(
                    key=name, value=json.dumps(value), low=low, high=high))
            return value

        host = spec.get("host", "127.0.0.1")
        if not isinstance(host, str) or not host:
            raise ServeError(_("job.json's host is {value}; expected an address such as 127.0.0.1").format(value=json.dumps(host)))
        generation = spec.get("generation") or {}
        if not isinstance(generation, dict):
            raise ServeError(_("job.json's generation is not a mapping"))
        for name, low, high in (("max_new_tokens", 1, 10_000_000), ("temperature", 0, 2), ("top_p", 0, 1)):
            value = generation.get(name, GENERATION_DEFAULTS[name])
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise ServeError(_("job.json's generation {key} is {value}; expected a number from {low} to {high}").format(
                    key=name, value=json.dumps(value), low=low, high=high))
        device = spec.get("device") or "auto"
        return cls(host, number("port", 8000, 0, 65535), number("queue_size", 8, 0, 100_000),
                   number("max_tokens_limit", 4096, 1, 10_000_000), number("max_body_bytes", 1 << 20, 1024, 1 << 30),
                   generation, str(device), number("max_batch", 8, 1, 64))


def read_spec(job_dir: Path) -> dict[str, Any]:
    try:
        spec = json.loads((job_dir / JOB_SPEC_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ServeError(_("cannot read {file}: {error}").format(file=job_dir / JOB_SPEC_FILE, error=err)) from None
    if not isinstance(spec, dict):
        raise ServeError(_("{file} is not a JSON object").format(file=job_dir / JOB_SPEC_FILE))
    return spec


def read_key(key_file: Any, environ: dict[str, str] | os._Environ) -> str | None:
    """The API key: the key file's text stripped, else FTUI_API_KEY, else API_KEY; None for
    none. An empty or unreadable key file is an error (a file given means a key is wanted)."""
    if key_file:
        path = Path(str(key_file)).expanduser()
        try:
            with open(path, "rb") as fh:
                data = fh.read(KEY_FILE_MAX + 1)
        except OSError as err:
            raise ServeError(_("cannot read the API key file {path}: {error}; give a readable file with --api-key-file")
                             .format(path=path, error=err.strerror or err)) from None
        if len(data) > KEY_FILE_MAX:
            raise ServeError(_("the API key file {path} is over {n} bytes; it should hold the key alone").format(
                path=path, n=KEY_FILE_MAX))
        try:
            key = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise ServeError(_("the API key file {path} is not UTF-8 text; write the key in it as text").format(path=path)) from None
        if not key:
            raise ServeError(_("the API key file {path} is empty; write the key in it (one line)").format(path=path))
        return key
    for name in KEY_ENV:
        key = (environ.get(name) or "").strip()
        if key:
            return key
    return None


def warn_key_file(key_file: Any, writer: EventWriter | None) -> None:
    """A key file others can read is said once (the key still works)."""
    if not key_file or writer is None:
        return
    path = Path(str(key_file)).expanduser()
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & 0o077:
        writer.write("log", level="warning", message=_("the API key file {path} can be read by other users; chmod 600 it")
                     .format(path=path))


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (localhost, 127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def in_use(port: int, host: str) -> str:
    return _("port {port} on {host} is in use; choose another with --port").format(port=port, host=host)


def bind(host: str, port: int) -> socket.socket:
    """The server's one socket, bound by uvicorn (``Config.bind_socket``, its own way of binding
    before serving) but not yet listening: uvicorn listens once the model is loaded. ServeError
    saying what to do when the address or port cannot be had (uvicorn logs the OSError, then
    exits: the error is read from its log record)."""
    import uvicorn

    caught = _BindError()
    log = logging.getLogger("uvicorn.error")
    log.addHandler(caught)
    try:
        sock = uvicorn.Config(_no_app, host=host.strip("[]"), port=port, log_config=None).bind_socket()
    except SystemExit:
        raise ServeError(bind_problem(caught.error, host, port)) from None
    finally:
        log.removeHandler(caught)
    sock.set_inheritable(False)  # uvicorn leaves it inheritable for its worker processes; this job has none
    return sock


def bind_problem(err: OSError | None, host: str, port: int) -> str:
    code = getattr(err, "errno", None)
    if code == errno.EADDRINUSE:
        return in_use(port, host)
    if code == errno.EACCES:
        return _("port {port} on {host} needs privileges to bind; choose a port above 1023 with --port").format(port=port, host=host)
    if code == errno.EADDRNOTAVAIL:
        return _("{host} is not an address of this machine; give one of its addresses with --host "
                 "(127.0.0.1: this machine only)").format(host=host)
    return _("cannot serve on {host} port {port}: {error}").format(host=host, port=port, error=err)


class _BindError(logging.Handler):
    """Keeps the OSError uvicorn logs when it cannot bind."""

    error: OSError | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, OSError):
            self.error = record.msg


async def _no_app(scope: Any, receive: Any, send: Any) -> None:
    """The app of the configuration that only binds (never served)."""


# --- The model and its adapters


def load_models(spec: dict[str, Any], settings: Settings) -> tuple[Any, Any]:
    """The main model (job.json's source, as the chat worker loads it) and the switch between
    it and the extra LoRA adapters, each under its own served id."""
    from ftui.runner.chat import ChatModel
    from ftui.runner.serve_engine import ModelSwitch

    source = spec.get("source")
    if not isinstance(source, dict):
        raise ServeError(_("job.json has no model source; start the job with ftui serve"))
    main_id = str(spec.get("served_name") or served_default(source))
    adapters = adapter_list(spec.get("adapters"), main_id)
    loaded = ChatModel()
    loaded.load({**source, "device": settings.device})
    if not adapters:
        return loaded, ModelSwitch(loaded.model, main_id)
    from peft import PeftModel

    model, names = loaded.model, {}
    main_adapter = model.active_adapter if isinstance(model, PeftModel) else None  # a LoRA run's own adapter
    for i, (name, path) in enumerate(adapters):
        internal = f"serve_{i}"  # peft's adapter names are module names: the served id may hold dots or slashes
        try:
            if isinstance(model, PeftModel):
                model.load_adapter(str(path), adapter_name=internal)
            else:
                model = PeftModel.from_pretrained(model, str(path), adapter_name=internal)
        except (OSError, ValueError, RuntimeError, KeyError) as err:
            raise ServeError(_("cannot load the LoRA adapter {name} from {path} over {model}: {error}").format(
                name=name, path=path, model=loaded.label, error=f"{type(err).__name__}: {str(err)[:300]}")) from None
        names[name] = internal
    loaded.model = model.eval()
    return loaded, ModelSwitch(loaded.model, main_id, main_adapter, names)


def served_default(source: dict[str, Any]) -> str:
    """The main model's id when job.json names none: the run's folder name, or the model directory's."""
    return Path(str(source.get("run") or source.get("model") or "model")).name


def adapter_list(raw: Any, main_id: str) -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    for entry in raw or []:
        name = entry.get("name") if isinstance(entry, dict) else None
        path = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or not isinstance(path, str):
            raise ServeError(_("job.json's adapters must be a list of objects with a name and a path"))
        if name == main_id or name in (n for n, _p in out):
            raise ServeError(_("the model id {name} is served twice; give each LoRA adapter its own name").format(name=name))
        if not (Path(path) / "adapter_config.json").is_file():
            raise ServeError(_("{path} is not a LoRA adapter directory (no adapter_config.json)").format(path=path))
        out.append((name, Path(path)))
    return out


# --- Events


class LockedEvents:
    """The job's EventWriter shared by this thread, the server's loop and the stats thread."""

    def __init__(self, writer: EventWriter | None):
        self.writer = writer
        self.lock = threading.Lock()

    def write(self, kind: str, **fields: Any) -> None:
        if self.writer is None:
            return
        with self.lock:
            self.writer.write(kind, **fields)


class StatsReporter:
    """``serve_stats`` at most every STATS_EVERY_S while the counters change (and once more when
    they have stopped, with tokens_per_s 0), then once at the end; the failed requests' ``log``
    lines as they come. tokens_per_s: the tokens generated over the last STATS_EVERY_S."""

    SAMPLE_S = 0.5

    def __init__(self, stats: Any, events: LockedEvents):
        self.stats, self.events = stats, events
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="serve-stats", daemon=True)
        self._last: dict[str, int] | None = None
        self._last_tps = 0.0
        self._last_at = time.monotonic()
        self._samples: collections.deque[tuple[float, int]] = collections.deque([(self._last_at, stats.get("generated_tokens"))])

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._done.wait(self.SAMPLE_S):
            self._problems()
            if time.monotonic() - self._last_at >= STATS_EVERY_S:
                self.report()

    def _problems(self) -> None:
        for level, message in self.stats.take_problems():
            self.events.write("log", level=level, message=message)

    def _rate(self, now: float, tokens: int) -> float:
        """Tokens per second over the window ending now (0 when none were generated in it)."""
        self._samples.append((now, tokens))
        while len(self._samples) > 2 and now - self._samples[1][0] >= STATS_EVERY_S:
            self._samples.popleft()
        (t0, n0) = self._samples[0]
        return round((tokens - n0) / (now - t0), 2) if now > t0 and tokens > n0 else 0.0

    def report(self, force: bool = False) -> None:
        counts = self.stats.snapshot()
        now = time.monotonic()
        tps = self._rate(now, counts["generated_tokens"])
        self._last_at = now
        if not force and counts == self._last and self._last_tps == 0:
            return
        self.events.write("serve_stats", **counts, tokens_per_s=tps, uptime_s=round(self.stats.uptime(), 1))
        self._last, self._last_tps = counts, tps

    def finish(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)
        self._problems()
        self.report(force=True)
