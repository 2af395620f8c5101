"""The chat worker: ``python -m ftui.runner chat``, JSON lines on stdin and stdout.

The model lives here, never in the app's process: the app stays light, and a crash or an
out-of-memory error here cannot take the dashboard down. One model per worker (the compare
view starts two). Requests (one JSON object per line on stdin):

    {"op": "load", "run": RUN_DIR, "checkpoint": "final" | "step-N" | null, "base": false, "device": "cpu"}
    {"op": "load", "model": PATH, "adapter": PATH | null, "device": "auto"}
    {"op": "generate", "id": 1, "messages": [{"role": "user", "content": "...", "images": [PATH, ...], "videos": [PATH]}],
     "system": "...", "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 256}
    {"op": "stop"}                      stops the generation in progress
    {"op": "quit"}

A message's ``images`` (optional) go with it: its ``<image>`` placeholders say where, or they are
put at its start (LLaMA-Factory's chat engine; ``"images"`` beside ``messages`` is its form,
taken too: ``ftui.runner.chat_images``). A text model given images, a file that is missing or
not an image, the same for ``videos`` (the Qwen families': ``ftui.runner.chat_videos``), or a model that
reads no videos given one: an ``error`` reply, and the worker stays up.

Replies (stdout): {"type": "ready"}, {"type": "loaded", ...}, {"type": "token", "id", "text"},
{"type": "done", "id", "tokens", "seconds", "tokens_per_s", "stopped"}, {"type": "error", "id"?,
"message"}. Errors are messages, never tracebacks on the app's screen (those go to stderr).
Generation (the backend of ``ftui.runner.backends``, the one the predict job uses too) runs in a thread
with transformers' TextIteratorStreamer, so "stop" is read while tokens stream.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from ftui.config.problems import ConfigError
from ftui.config.schema import RunConfig
from ftui.config.load import read_run_config
from ftui.config.machine_checks import gpu_run_on_cpu
from ftui.i18n import _
from ftui.rundir.paths import CONFIG_FILE, resolve_model_path


class ChatError(Exception):
    """A request that cannot be served; the message is shown to the user as is."""


class Out:
    """Serialised JSON-line writer (the generation thread and the reader both write)."""

    def __init__(self, stream: Any = None):
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()

    def send(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"type": kind, **fields}, ensure_ascii=False)
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()


def pick_device(want: str | None) -> Any:
    import torch

    want = want or "auto"
    if want == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if want.startswith("cuda") and not torch.cuda.is_available():
        raise ChatError(_("device {device} was asked for but torch sees no CUDA GPU; use cpu").format(device=want))
    device = torch.device(want)
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        # cuda:N counts only the GPUs CUDA_VISIBLE_DEVICES leaves, in its order
        n = torch.cuda.device_count()
        raise ChatError(_("device {device} was asked for but this process sees {n} GPU(s) (CUDA_VISIBLE_DEVICES={visible}); "
                          "use cuda:0 to cuda:{last}, or cpu").format(
            device=want, n=n, visible=repr(os.environ.get("CUDA_VISIBLE_DEVICES")), last=n - 1))
    return device


def chat_dtype(device: Any, infer_dtype: str | None = None) -> Any:
    """The weights' type: LLaMA-Factory's ``infer_dtype`` when it names one (float16, bfloat16,
    float32); for auto, bf16 where the chosen GPU computes it (compute capability 8.0+), else
    fp32. V100 / T4 only emulate bf16, many times slower, and plain is_bf16_supported() says
    True there; it also asks about the current device, not the chosen one."""
    import torch

    if infer_dtype not in (None, "auto"):
        if infer_dtype not in ("float16", "bfloat16", "float32"):
            raise ChatError(_("infer_dtype {value} is not one of auto, float16, bfloat16, float32").format(value=repr(infer_dtype)))
        return getattr(torch, infer_dtype)
    if device.type != "cuda":
        return torch.float32
    with torch.cuda.device(device):
        native = torch.cuda.is_bf16_supported(including_emulation=False)
    return torch.bfloat16 if native else torch.float32


def check_free_memory(device: Any, need_bytes: int) -> None:
    """Says plainly when the chosen GPU has not enough free memory (e.g. training uses it)."""
    import torch

    if device.type != "cuda":
        return
    free, _total = torch.cuda.mem_get_info(device)
    if need_bytes * 1.2 > free:
        raise ChatError(_("not enough free memory on {device}: the model needs about {need:.1f} GiB, {free:.1f} GiB are free "
                          "(training may be using it); choose the CPU or another GPU").format(
            device=device, need=need_bytes / 2**30, free=free / 2**30))


def _weights_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.safetensors")) or sum(p.stat().st_size for p in path.glob("*.bin"))


def _generation_eos_ids(model_dir: Path) -> list[int]:
    """The stop token ids a model directory's generation_config.json lists (none if it has none)."""
    try:
        data = json.loads((model_dir / "generation_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    ids = data.get("eos_token_id") if isinstance(data, dict) else None
    ids = ids if isinstance(ids, list) else [ids]
    return [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]


def refuse_backend(name: str) -> None:
    """A run whose config names an infer_backend the runner does not have (LLaMA-Factory's
    vllm, sglang) is refused by name before its weights load (ftui.presets.infer_backends)."""
    from ftui.presets.infer_backends import refusal
    from ftui.runner.backends import BACKENDS

    if name not in BACKENDS:
        raise ChatError(refusal(name, tuple(BACKENDS)))


class ChatModel:
    """A loaded model + tokenizer + chat template, and what it was loaded from."""

    def __init__(self) -> None:
        self.model: Any = None
        self.tokenizer: Any = None
        self.template: str | None = None
        self.stop_ids: list[int] = []
        self.device: Any = None
        self.label = ""
        self.note: str | None = None  # said once with the next "loaded" reply (a GPU run loaded on the CPU)
        self.images: Any = None  # a vision-language model's ChatImages (ftui.runner.chat_images)
        self.images_why: str | None = None  # why it has none
        self.videos: Any = None  # a Qwen vision-language model's ChatVideos (ftui.runner.chat_videos)
        self.videos_why: str | None = None  # why it has none
        self.infer_dtype: str | None = None  # the load request's infer_dtype (a job's config), over a run's own

    # --- Loading

    def load(self, req: dict[str, Any]) -> dict[str, Any]:
        device = pick_device(req.get("device"))
        self.infer_dtype = req.get("infer_dtype")
        if req.get("run"):
            return self._load_run(Path(req["run"]), req.get("checkpoint"), bool(req.get("base")), device)
        if req.get("model"):
            return self._load_paths(Path(req["model"]).expanduser(), req.get("adapter"), device)
        raise ChatError(_("load needs a run or a model path"))

    def _load_run(self, run_dir: Path, which: str | None, base: bool, device: Any) -> dict[str, Any]:
        from ftui.runner.weights import WeightsError, locate

        if not (run_dir / CONFIG_FILE).is_file():
            raise ChatError(_("{path} is not a run directory (no {file})").format(path=run_dir, file=CONFIG_FILE))
        try:
            cfg = read_run_config(run_dir / CONFIG_FILE)  # its schema only: a GPU run is chatted with on any machine
            refuse_backend(cfg.infer_backend)
            if device.type == "cpu":
                cfg, self.note = gpu_run_on_cpu(cfg)
            weights = locate(run_dir, cfg, "base" if base else which)
        except (ConfigError, WeightsError) as err:
            raise ChatError(str(err)) from None
        self._set(self._load(weights, cfg, device), weights.tokenizer, cfg, device,
                  [weights.tokenizer, weights.path, weights.base, Path(resolve_model_path(cfg.model_name_or_path))])
        self.label = weights.label
        return self._loaded_info()

    def _load_paths(self, model_path: Path, adapter: str | None, device: Any) -> dict[str, Any]:
        from ftui.runner.weights import TrainedWeights

        resolved = Path(resolve_model_path(str(model_path)))
        if not (resolved / "config.json").is_file():
            raise ChatError(_("{path} is not a model directory (no config.json); give a directory written by save_pretrained")
                            .format(path=model_path))
        tok_dir = resolved
        weights = TrainedWeights("base", resolved, resolved, resolved, model_path.name)
        if adapter:
            a = Path(adapter).expanduser()
            if not (a / "adapter_config.json").is_file():
                raise ChatError(_("{path} is not a LoRA adapter directory (no adapter_config.json)").format(path=a))
            if (a / "tokenizer_config.json").is_file():
                tok_dir = a
            weights = TrainedWeights("final-adapter", a, resolved, tok_dir, f"{model_path.name} + {a.name}")
        self._set(self._load(weights, None, device), tok_dir, None, device, [tok_dir, resolved])
        self.label = weights.label
        return self._loaded_info()

    def _load(self, weights: Any, cfg: RunConfig | None, device: Any) -> Any:
        """The weights on ``device`` in the serving dtype. Built on the CPU (a checkpoint's fp32
        weights are loaded there, then cast), so the GPU never holds an fp32 copy and the
        free-memory check (serving dtype) is the whole story."""
        import torch

        from ftui.runner.weights import WeightsError, load_weights

        dtype = chat_dtype(device, self.infer_dtype or (cfg.infer_dtype if cfg is not None else None))
        if not weights.from_checkpoint:
            check_free_memory(device, _weights_bytes(weights.path if weights.kind != "final-adapter" else weights.base))
        try:
            model = load_weights(weights, cfg, dtype)
        except WeightsError as err:
            raise ChatError(str(err)) from None
        if weights.from_checkpoint:
            check_free_memory(device, sum(p.numel() for p in model.parameters()) * torch.finfo(dtype).bits // 8)
        return model.to(device).eval()

    def _set(self, model: Any, tokenizer_dir: Path, cfg: RunConfig | None, device: Any, media_dirs: list[Path]) -> None:
        """``media_dirs``: where the model's image processor may be, in order (a VLM's)."""
        from transformers import AutoTokenizer

        from ftui.data.chat_template import fix_tokenizer, to_jinja
        from ftui.presets.templates import TEMPLATES
        from ftui.runner.chat_images import chat_images
        from ftui.runner.chat_videos import chat_videos
        from ftui.runner.model import chat_template_for
        from ftui.runner.vlm import family_of

        tok = AutoTokenizer.from_pretrained(tokenizer_dir)
        if cfg is not None and cfg.template:
            fix_tokenizer(tok, TEMPLATES[cfg.template])  # a checkpoint's base tokenizer lacks the stop words
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        if cfg is not None:
            self.template = chat_template_for(cfg, tok)
        else:
            self.template = tok.chat_template or to_jinja(TEMPLATES["default"], tok.bos_token, tok.eos_token)
        stop_words = TEMPLATES[cfg.template].stop_words if cfg is not None and cfg.template else ()
        # Generation ends at EOS or any of the template's stop words (LLaMA-Factory's stop token
        # ids); a model directory's generation_config.json names them (ftui export writes it).
        listed = _generation_eos_ids(Path(getattr(model, "name_or_path", "") or ".")) if cfg is None else []
        self.stop_ids = sorted({tok.eos_token_id, *tok.convert_tokens_to_ids(list(stop_words)), *listed} - {None})
        self.model, self.tokenizer, self.device = model, tok, device
        self.images, self.images_why = chat_images(family_of(model), media_dirs, cfg)
        self.videos, self.videos_why = chat_videos(family_of(model), media_dirs, cfg)

    def _loaded_info(self) -> dict[str, Any]:
        params = sum(p.numel() for p in self.model.parameters())
        info = {"label": self.label, "device": str(self.device), "params": params}
        note, self.note = self.note, None
        return info | ({"note": note} if note else {})

    # --- Generation

    def prompt_ids(self, messages: list[dict[str, str]], system: str | None) -> list[int]:
        msgs = ([{"role": "system", "content": system}] if system else []) + list(messages)
        text = self.tokenizer.apply_chat_template(msgs, chat_template=self.template, tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_inputs(self, messages: list[dict[str, Any]], system: str | None, images: list[str] | None = None,
                      videos: list[str] | None = None) -> tuple[list[int], dict[str, Any] | None]:
        """The prompt's ids, and its images' and videos' tensors (None without any): ``images``
        / ``videos``, the request's own, or each message's (ftui.runner.chat_images,
        ftui.runner.chat_videos)."""
        from ftui.runner.chat_images import TEXT_ONLY, ImageRequestError, placed, text_only_message
        from ftui.runner.chat_videos import VIDEO_PLACEHOLDER, text_only_videos

        try:
            messages, paths = placed(messages, images)
            messages, video_paths = placed(messages, videos, "videos", VIDEO_PLACEHOLDER)
            if video_paths and self.videos is None:
                raise ImageRequestError(text_only_videos(self.label) if self.videos_why == TEXT_ONLY else str(self.videos_why))
            media = None
            if paths:
                if self.images is None:
                    raise ImageRequestError(text_only_message(self.label) if self.images_why == TEXT_ONLY else str(self.images_why))
                media, tokens = self.images.encode(paths)
                messages = self.images.expand(messages, tokens)
            if video_paths:
                messages, tensors = self.videos.expand(messages, video_paths)
                media = {**(media or {}), **tensors}
        except ImageRequestError as err:
            raise ChatError(str(err)) from None
        return self.prompt_ids([{"role": m["role"], "content": m["content"]} for m in messages], system), media

    def generate(self, req: dict[str, Any], out: Out, stop: threading.Event) -> None:
        from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

        from ftui.runner.backends import backend
        from ftui.runner.generate import CHAT_DEFAULTS, sampling_kwargs

        class StopOnRequest(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):  # noqa: D401 (transformers' signature)
                return stop.is_set()

        rid = req.get("id")
        if self.model is None:
            raise ChatError(_("no model is loaded; load one first"))
        messages = req.get("messages") or []
        if not messages or not all(isinstance(m, dict) and m.get("role") and isinstance(m.get("content"), str) for m in messages):
            raise ChatError(_("messages must be a list of {role, content}"))
        ids, media = self.prompt_inputs(messages, req.get("system"), req.get("images"), req.get("videos"))
        sampling = sampling_kwargs(req, CHAT_DEFAULTS)
        generate = backend()

        class CountingStreamer(TextIteratorStreamer):
            """Counts generated tokens (for tokens/s) as they pass to the text decoder."""

            count = 0

            def put(self, value):
                if not (self.skip_prompt and self.next_tokens_are_prompt):
                    self.count += int(value.numel())
                super().put(value)

        streamer = CountingStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                generate(self, [ids], sampling, streamer=streamer, stopping_criteria=StoppingCriteriaList([StopOnRequest()]),
                         **({"media": [media]} if media else {}))
            except BaseException as exc:  # reported below, after the stream ends
                errors.append(exc)
                streamer.end()

        started = time.perf_counter()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        for text in streamer:
            if text:
                out.send("token", id=rid, text=text)
        thread.join()
        if errors:
            exc = errors[0]
            traceback.print_exception(exc, file=sys.stderr)
            if type(exc).__name__ == "OutOfMemoryError":
                raise ChatError(_("out of memory while generating; lower max_new_tokens or load the model on the CPU"))
            raise ChatError(_("generation failed: {error}").format(error=f"{type(exc).__name__}: {exc}"))
        seconds = time.perf_counter() - started
        out.send("done", id=rid, tokens=streamer.count, seconds=round(seconds, 3),
                 tokens_per_s=round(streamer.count / seconds, 2) if seconds > 0 else None, stopped=stop.is_set())



def serve(stdin: Any = None, out: Out | None = None) -> int:
    """The request loop; generation runs in a thread so that "stop" is read meanwhile."""
    stdin = stdin or sys.stdin
    out = out or Out()
    chat = ChatModel()
    stop = threading.Event()
    worker: threading.Thread | None = None
    out.send("ready")

    def generate(req: dict[str, Any]) -> None:
        try:
            chat.generate(req, out, stop)
        except ChatError as err:
            out.send("error", id=req.get("id"), message=str(err))
        except Exception as err:  # noqa: BLE001 (anything else is still a message, not a crash)
            traceback.print_exc()
            out.send("error", id=req.get("id"), message=f"{type(err).__name__}: {err}")

    for line in stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError(_("expected a JSON object"))
        except ValueError as err:
            out.send("error", message=_("bad request: {error}").format(error=err))
            continue
        op = req.get("op")
        if op == "quit":
            break
        if op == "stop":
            stop.set()
            continue
        if worker is not None and worker.is_alive() and op == "generate":
            worker.join(timeout=1.0)  # one that has just sent its last reply (an error, "done") is ending
        if worker is not None and worker.is_alive():
            if op == "generate":
                out.send("error", id=req.get("id"), message=_("a generation is still running; stop it first"))
                continue
            worker.join()
        if op == "load":
            try:
                out.send("loaded", **chat.load(req))
            except ChatError as err:
                out.send("error", op="load", message=str(err))
            except Exception as err:  # noqa: BLE001
                traceback.print_exc()
                out.send("error", op="load", message=_("cannot load the model: {error}").format(error=f"{type(err).__name__}: {err}"))
        elif op == "generate":
            stop.clear()
            worker = threading.Thread(target=generate, args=(req,), daemon=True)
            worker.start()
        else:
            out.send("error", message=_("unknown op {op}; expected load, generate, stop or quit").format(op=repr(op)))
    if worker is not None:
        stop.set()
        worker.join(timeout=10)
    return 0


def main(argv: list[str] | None = None) -> int:
    sys.stdout.reconfigure(line_buffering=True)
    return serve()
