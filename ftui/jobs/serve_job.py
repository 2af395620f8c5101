"""A serve job's directory (``ftui serve``: an OpenAI-compatible API over a run's model), and
every refusal said before it exists.

The job is laid out as the other jobs are (``RUN/serve/ID``; a model outside any run:
``RUNS_ROOT/serve/ID``): ``config.yaml`` is the run's config narrowed to one process
(``ftui.jobs.offline.job_config``), ``job.json`` what the server does (what it loads, the names
it serves, where it listens, its limits). The API key is never written there: only the path
of the file that holds it, or nothing (the runner then reads FTUI_API_KEY, else API_KEY, from
its environment). Everything is checked before the directory is made, so a refused job leaves
nothing behind. Torch-free; the server is ``ftui.runner.serve``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from ftui.config.load import read_run_config
from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.jobs.backends import backend_problem, job_backend
from ftui.jobs.offline import GENERATION_DEFAULTS, job_config, new_job_dir, source_label
from ftui.rundir.paths import BASE_MODEL_DIR, CONFIG_FILE, FINAL_DIR, JOB_SPEC_FILE, resolve_model_path
from ftui.safety.bounded_input import load_json

KEY_ENV = ("FTUI_API_KEY", "API_KEY")  # where the runner finds the key without a file (API_KEY: LLaMA-Factory's)
LOOPBACK_NAMES = ("localhost",)
NAME_RE = re.compile(r"[A-Za-z0-9._:/-]{1,64}")
MAX_QUEUE = 1024
MAX_BATCH = 64  # requests generated together (ftui.runner.serve_batch)
MAX_TOKENS_LIMIT = 10_000_000  # the runner's own bounds on job.json (ftui.runner.serve reads it as untrusted)
BODY_BYTES = (1024, 1 << 30)
MAX_KEY_FILE = 64 << 10  # a key file is a line; a bigger one is not a key file
ADAPTER_CONFIG = "adapter_config.json"
DEFAULTS = {"host": "127.0.0.1", "port": 8000, "queue_size": 8, "max_tokens_limit": 4096, "max_body_bytes": 1 << 20,
            "max_batch": 8}


class ServeJobError(ValueError):
    """A serve job that cannot be prepared as asked; the message says what to do."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (127.0.0.0/8, ::1, localhost): no key needed there."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def key_file_problem(path: str) -> str | None:
    """Why ``path`` cannot give the API key (missing, a directory, unreadable, empty), or None.
    The key itself is read only to see that there is one, and never kept."""
    file = Path(path).expanduser()
    if file.is_dir():
        return _("the API key file {path} is a directory; give the file that holds the key").format(path=path)
    try:
        with open(file, "rb") as f:
            text = f.read(MAX_KEY_FILE + 1)
    except FileNotFoundError:
        return _("the API key file {path} does not exist; write the key into it (one line) or give another").format(path=path)
    except OSError as err:
        return _("cannot read the API key file {path}: {reason}").format(path=path, reason=err.strerror or err)
    if len(text) > MAX_KEY_FILE:
        return _("the API key file {path} is larger than {size} KiB: not a key file").format(path=path, size=MAX_KEY_FILE >> 10)
    if not text.strip():
        return _("the API key file {path} is empty; write the key into it (one line)").format(path=path)
    return None


def env_key_set() -> bool:
    return any(os.environ.get(name, "").strip() for name in KEY_ENV)


def listen_problem(host: str, port: int, api_key_file: str | None) -> str | None:
    """Where the server listens, and whether a key guards it: an address beyond this machine
    needs one (a key file, or FTUI_API_KEY / API_KEY in the environment)."""
    if not host or not host.isprintable() or any(c.isspace() for c in host) or len(host) > 255:
        return _("--host {host}: give an address to listen on (127.0.0.1, the default: this machine only)").format(host=repr(host))
    if type(port) is not int or not 0 <= port <= 65535:
        return _("--port {port}: a port is 0 to 65535 (0: any free port)").format(port=port)
    if api_key_file is not None:
        problem = key_file_problem(api_key_file)
        if problem:
            return problem
    elif not is_loopback(host) and not env_key_set():
        return _("serving on {host} (beyond this machine) needs an API key: give --api-key-file FILE, or set FTUI_API_KEY "
                 "in the environment; or serve on 127.0.0.1").format(host=host)
    return None


def name_problem(name: str, what: str) -> str | None:
    if not NAME_RE.fullmatch(name):
        return _("{what} {name}: a model name is 1 to 64 characters of A-Z a-z 0-9 . _ : / -").format(what=what, name=repr(name)[:80])
    return None


def default_served_name(source: dict[str, Any]) -> str:
    """The run's folder name (or the model directory's), made a valid model id."""
    raw = Path(str(source.get("run") or source.get("model") or "model")).name
    name = re.sub(r"[^A-Za-z0-9._:/-]+", "-", raw).strip("-")[:64]
    return name or "model"


def _normal(path_or_name: str) -> str:
    """A model reference as compared: a local directory by its real path, a hub name as written."""
    resolved = resolve_model_path(path_or_name)
    local = Path(resolved).expanduser()
    return os.path.realpath(local) if local.exists() else resolved.rstrip("/")


def served_base(run_dir: Path | None, cfg: RunConfig, source: dict[str, Any]) -> str:
    """The base model the served weights sit on: a run's saved random base or its
    model_name_or_path; a model directory's own path."""
    if run_dir is not None:
        saved = run_dir / BASE_MODEL_DIR
        return _normal(str(saved) if saved.is_dir() else cfg.model_name_or_path)
    return _normal(str(source.get("model")))


def adapter_dir(path: str) -> Path:
    """A --lora PATH as the adapter directory it names: an adapter directory itself, or a
    run whose final/ holds a LoRA adapter."""
    given = Path(path).expanduser()
    if (given / ADAPTER_CONFIG).is_file():
        return given.resolve()
    if (given / FINAL_DIR / ADAPTER_CONFIG).is_file():
        return (given / FINAL_DIR).resolve()
    if (given / CONFIG_FILE).is_file():
        raise ServeJobError(_("--lora {path}: the run's final/ holds no LoRA adapter (a full fine-tune, or not trained yet); "
                              "serve it as a job of its own").format(path=path))
    raise ServeJobError(_("--lora {path} is not a LoRA adapter directory (no {file}) nor a run whose final/ holds one").format(
        path=path, file=ADAPTER_CONFIG))


def adapter_base(adapter: Path) -> str:
    try:
        data = load_json((adapter / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ServeJobError(_("cannot read {path}: {reason}").format(path=adapter / ADAPTER_CONFIG, reason=err)) from None
    base = data.get("base_model_name_or_path") if isinstance(data, dict) else None
    if not isinstance(base, str) or not base:
        raise ServeJobError(_("{path} names no base_model_name_or_path: ftui cannot tell which model it goes on").format(
            path=adapter / ADAPTER_CONFIG))
    return base


def check_adapters(adapters: list[tuple[str, str]] | tuple, base: str, taken: set[str]) -> list[dict[str, str]]:
    """Each --lora NAME=PATH checked (a valid, unused name; an adapter over the served base) as
    job.json lists them."""
    out = []
    for name, path in adapters:
        problem = name_problem(name, "--lora")
        if problem:
            raise ServeJobError(problem)
        if name in taken:
            raise ServeJobError(_("--lora {name}: the name is served already; give each model its own name").format(name=name))
        taken.add(name)
        found = adapter_dir(path)
        on = adapter_base(found)
        if _normal(on) != base:
            raise ServeJobError(_("--lora {name}: the adapter was trained on {adapter_base}, the served model's base is "
                                  "{base}; serve it over its own base").format(name=name, adapter_base=on, base=base))
        out.append({"name": name, "path": str(found)})
    return out


def limits_problem(queue_size: int, max_tokens_limit: int, max_body_bytes: int, max_batch: int = 8) -> str | None:
    if type(queue_size) is not int or not 0 <= queue_size <= MAX_QUEUE:
        return _("--queue {value}: requests waiting are 0 to {most}").format(value=queue_size, most=MAX_QUEUE)
    if type(max_batch) is not int or not 1 <= max_batch <= MAX_BATCH:
        return _("--batch {value}: requests generated together are 1 to {most} (1: one at a time)").format(
            value=max_batch, most=MAX_BATCH)
    if type(max_tokens_limit) is not int or not 1 <= max_tokens_limit <= MAX_TOKENS_LIMIT:
        return _("--max-tokens {value}: must be 1 to {most}").format(value=max_tokens_limit, most=MAX_TOKENS_LIMIT)
    if type(max_body_bytes) is not int or not BODY_BYTES[0] <= max_body_bytes <= BODY_BYTES[1]:
        return _("the request body limit is {low} to {high} bytes, not {value}").format(
            low=BODY_BYTES[0], high=BODY_BYTES[1], value=max_body_bytes)
    return None


def prepare_serve_job(*, run_dir: Path | None, source: dict[str, Any], model_config: RunConfig | None = None,
                      root: Path | None = None, served_name: str | None = None, adapters: list[tuple[str, str]] | tuple = (),
                      host: str = "127.0.0.1", port: int = 8000, api_key_file: str | None = None, queue_size: int = 8,
                      max_tokens_limit: int = 4096, max_body_bytes: int = 1 << 20, device: str = "auto",
                      generation: dict[str, Any] | None = None, max_batch: int = 8) -> tuple[Path, RunConfig]:
    """Checks the serve job and makes its directory (config.yaml, job.json); returns it with
    the job's config. ``source``: what it loads, as ``ftui.jobs.offline.source_of`` says it;
    ``model_config``/``root``: a model outside any run (its template; the job under root).
    ServeJobError (nothing made) says what to change."""
    if run_dir is not None:
        run_dir = Path(run_dir).resolve()
        base = read_run_config(run_dir / CONFIG_FILE)  # its schema only: a GPU run is served on any machine
        parent = run_dir
        source = {**source, "run": str(run_dir)}
    elif model_config is not None and root is not None:
        base, parent = model_config, Path(root).expanduser()
        source = {**source, "model": _normal(str(source.get("model"))),
                  "adapter": str(Path(source["adapter"]).expanduser().resolve()) if source.get("adapter") else None}
    else:
        raise ServeJobError(_("give a run, or --model PATH"))
    generation = dict(generation or {})
    problem = listen_problem(host, port, api_key_file) or limits_problem(queue_size, max_tokens_limit, max_body_bytes, max_batch)
    problem = problem or backend_problem(job_backend(generation, base))
    if problem is None and device not in ("auto", "cpu", "cuda"):
        problem = _("--device {device}: auto, cpu or cuda").format(device=device)
    name = served_name if served_name is not None else default_served_name(source)
    problem = problem or name_problem(name, "--served-name")
    if problem:
        raise ServeJobError(problem)
    served = check_adapters(adapters, served_base(run_dir, base, source), {name})
    cfg = job_config(base, base.dataset, None, None, 1, device)  # one process; its dataset is not read
    if device == "cuda":
        from ftui.machine.facts import MachineFacts

        if not MachineFacts.gather(cfg.gpus).gpu_present:
            raise ServeJobError(_("no CUDA GPU was found on this machine (NVML sees none); use --device auto or cpu"))
    settings = {key: GENERATION_DEFAULTS[key] for key in ("max_new_tokens", "temperature", "top_p")}
    settings.update({k: v for k, v in generation.items() if k != "infer_backend"})
    settings["max_new_tokens"] = min(settings["max_new_tokens"], max_tokens_limit)
    spec = {"job": "serve", "source": source, "source_label": source_label(source), "served_name": name, "adapters": served,
            "host": host, "port": port,
            "api_key_file": str(Path(api_key_file).expanduser().resolve()) if api_key_file else None,
            "queue_size": queue_size, "max_batch": max_batch, "max_tokens_limit": max_tokens_limit, "max_body_bytes": max_body_bytes,
            "generation": settings, "device": device, "created": time.time(), "run": str(run_dir) if run_dir else None}
    job_dir = new_job_dir(parent, "serve")
    cfg.save(job_dir / CONFIG_FILE, include_unsupported=False)
    tmp = job_dir / (JOB_SPEC_FILE + ".tmp")
    tmp.write_text(json.dumps(spec, indent=2))
    os.replace(tmp, job_dir / JOB_SPEC_FILE)
    return job_dir, cfg


def served_url(host: str, port: int) -> str:
    """The base URL a client uses (``http://HOST:PORT/v1``; an IPv6 address in brackets)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/v1"
