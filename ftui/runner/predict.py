"""The predict job: ``python -m ftui.runner predict JOB_DIR``: a model's answers to a dataset's
prompts, and LLaMA-Factory's scores of them (its "Evaluate & Predict" tab, ``do_predict`` with
``predict_with_generate``).

JOB_DIR (``RUN/predict/ID``, made by ``ftui predict``) is laid out as a run directory: its
config.yaml is the run's own config with the datasets to predict (so the run's template and
cutoff_len encode the prompts), its job.json names the model source and the generation
settings. Each record's last answer is the label; everything before it is the prompt, encoded
as LLaMA-Factory's unsupervised processor does (``encode_oneturn``; the prompt and the answer
share ``cutoff_len``), and the model continues it (the backend of ``ftui.runner.backends`` that
the job's ``infer_backend`` names, as the chat worker does): batches left-padded, with the KV cache, ending at EOS or the template's stop words.
Several processes each take every N-th example; each writes its answers to a part file as it
goes, so a stopped job keeps what it did; rank 0 then writes ``generated_predictions.jsonl``
(``{"prompt", "predict", "label"}``, dataset order; a prompt with images adds ``"images"``, one with
videos ``"videos"``, the files it had, absolute: LLaMA-Factory writes no such fields, its readers
ignore them; the prompt holds the expanded image and video tokens as LLaMA-Factory's does) and ``predict_results.json``
(``predict_bleu-4``, ``predict_rouge-1/2/l`` as LLaMA-Factory computes them, examples and
tokens per second).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ftui.config.schema import RunConfig
from ftui.data.conversation import split_budget
from ftui.rundir.event_writer import EventWriter
from ftui.i18n import _
from ftui.rundir.paths import JOB_SPEC_FILE, PREDICT_RESULTS_FILE, PREDICTIONS_FILE
from ftui.data.records import DataFormatError, to_conversation
from ftui.runner.data import load_all
from ftui.runner.distributed import process_group
from ftui.runner.engines import DistInfo
from ftui.runner.faults import Heartbeat, StopRequest
from ftui.runner.backends import backend
from ftui.runner.generate import PREDICT_DEFAULTS, sampling_kwargs
from ftui.runner.job import run_job
from ftui.runner.predict_media import PromptImages, batch_media
from ftui.runner.stages.preference import ComparisonEncoder

PART = "part-{rank}.jsonl"  # each rank's answers as it goes: {"index", "prompt", "predict", "label", "tokens"}
DONE = "done-{rank}"  # how many examples each rank has answered (rank 0 sums them for progress)
PROGRESS_EVERY_S = 2.0


def main(argv: list[str] | None = None) -> int:
    return run_job("predict", predict, sys.argv[1:] if argv is None else argv)


def read_spec(job_dir: Path) -> dict[str, Any]:
    return json.loads((job_dir / JOB_SPEC_FILE).read_text(encoding="utf-8"))


def job_device(cfg: RunConfig, info: DistInfo) -> str:
    """This rank's device, made current: its own GPU where there is one (and the config does
    not say cpu)."""
    if cfg.device != "cpu" and torch.cuda.is_available():
        torch.cuda.set_device(info.local_rank)
        return f"cuda:{info.local_rank}"
    if cfg.device == "cuda":
        raise RuntimeError(_("device is cuda but torch sees no CUDA GPU; use --device cpu"))
    return "cpu"


def load_model(spec: dict[str, Any], device: str, infer_dtype: str | None = None) -> Any:
    """The model to predict or evaluate with, loaded as chat loads it (a run's final/, a
    checkpoint of any engine, the base, or a model path with an adapter), in the job config's
    ``infer_dtype`` (a model outside a run has no config of its own to say it)."""
    from ftui.runner.chat import ChatError, ChatModel

    loaded = ChatModel()
    try:
        loaded.load(dict(spec["source"], device=device, infer_dtype=infer_dtype))
    except ChatError as err:
        raise DataFormatError(str(err)) from None  # a problem to fix (exit 2 from the CLI's checks)
    return loaded


def prompts(cfg: RunConfig, tokenizer: Any) -> tuple[list[dict[str, Any]], PromptImages]:
    """Every record's prompt ids and label text, in dataset order (records whose turns do not
    alternate are skipped, as in training), a record's image files with it; and the images'
    encoder the batches take their tensors from (ftui.runner.predict_media)."""
    from ftui.runner.model import template_name_for
    from ftui.runner.stages.sft import SFTStage

    encoder = ComparisonEncoder(cfg, tokenizer)
    images = PromptImages(cfg, encoder.renderer, template_name_for(cfg, tokenizer))
    out = []
    for spec, records in load_all(cfg):
        for i, record in enumerate(records):
            conv = to_conversation(record, spec, i)
            if conv is None:
                continue
            media = SFTStage.prompt_media(record, spec, i)
            paths, videos = media["images"], media["videos"]
            if paths or videos:
                conv, image_tokens, video_tokens, infos = images.expanded(conv, paths, spec, i, videos)
            head = type(conv)(conv.turns[:-1], conv.system, conv.tools)
            prompt, answer = encoder.encode(head, conv.turns[-1])
            source, target = split_budget(len(prompt), len(answer), cfg.cutoff_len)
            if paths or videos:
                images.check_cut(prompt[:source], image_tokens, spec, i, video_tokens)
            out.append({"ids": prompt[:source], "label": tokenizer.decode(answer[:target], skip_special_tokens=True),
                        **({"images": paths} if paths else {}),
                        **({"videos": videos, "video_infos": infos} if videos else {}),
                        **({"spec": spec, "record": i} if paths or videos else {})})
    if not out:
        raise DataFormatError(_("no record of the dataset has a prompt and an answer to predict"))
    return out, images


def predict(job_dir: Path, cfg: RunConfig, info: DistInfo, writer: EventWriter | None, stop: StopRequest,
            resume: Path | None = None) -> tuple[str, str]:
    spec = read_spec(job_dir)
    settings = spec.get("generation", {})
    backend_name = settings.get("infer_backend") or cfg.infer_backend  # the job's own (a predict YAML's), else its run's
    generate = backend(backend_name)  # before the model loads: an unknown backend is said at once
    device = job_device(cfg, info)
    torch.manual_seed(cfg.seed)
    heartbeat = Heartbeat(job_dir, info.rank)
    with process_group(cfg, info, torch.device(device)):
        loaded = load_model(spec, device, cfg.infer_dtype)
        items, images = prompts(cfg, loaded.tokenizer)
        mine = list(range(info.rank, len(items), info.world_size))
        if writer is not None:
            params = sum(p.numel() for p in loaded.model.parameters())
            writer.write("job_start", run_id=job_dir.name, job="predict", source=spec.get("source_label", loaded.label),
                         precision=str(loaded.model.dtype).removeprefix("torch."), world_size=info.world_size, model=loaded.label,
                         total_params=params, examples=len(items), dataset=cfg.dataset, device=device)
        bs = max(1, int(settings.get("batch_size", 8)))
        started, last_report = time.perf_counter(), 0.0
        done = tokens = 0
        with open(job_dir / PART.format(rank=info.rank), "w", encoding="utf-8") as part:
            for start in range(0, len(mine), bs):
                if stop.requested:
                    break
                batch = [items[k] for k in mine[start:start + bs]]
                media = batch_media(images, batch)
                answers = generate(loaded, [x["ids"] for x in batch], sampling_kwargs(settings, PREDICT_DEFAULTS),
                                   **({"media": media} if media else {}))
                for k, x, (answer, n) in zip(mine[start:start + bs], batch, answers):
                    prompt = loaded.tokenizer.decode(x["ids"], skip_special_tokens=False)
                    row = {"index": k, "prompt": prompt, "predict": answer, "label": x["label"], "tokens": n}
                    part.write(json.dumps(row | media_fields(x), ensure_ascii=False) + "\n")
                    tokens += n
                part.flush()
                done += len(batch)
                (job_dir / DONE.format(rank=info.rank)).write_text(str(done))
                heartbeat.beat()
                if writer is not None and (time.perf_counter() - last_report >= PROGRESS_EVERY_S or done == len(mine)):
                    last_report = time.perf_counter()
                    elapsed = last_report - started
                    total_done = sum(_read_done(job_dir, r) for r in range(info.world_size))
                    writer.write("progress", done=total_done, total=len(items),
                                 examples_per_s=round(total_done / elapsed, 3) if elapsed > 0 else None,
                                 tokens_per_s=round(tokens * info.world_size / elapsed, 1) if elapsed > 0 else None)
        if info.world_size > 1:
            torch.distributed.barrier()
        elapsed = time.perf_counter() - started
    if writer is None:
        return "completed", ""
    rows = merge_parts(job_dir, info.world_size)
    results = write_results(job_dir, rows, len(items), elapsed, writer, backend_name)
    if len(rows) < len(items):
        return "stopped", _("stopped after {done} of {total} examples: {file} holds them").format(
            done=len(rows), total=len(items), file=job_dir / PREDICTIONS_FILE)
    if "predict_bleu-4" in results:
        return "completed", _("{n} examples: {file}, BLEU-4 {bleu:.2f}, ROUGE-L {rouge:.2f}").format(
            n=len(rows), file=job_dir / PREDICTIONS_FILE, bleu=results["predict_bleu-4"], rouge=results["predict_rouge-l"])
    return "completed", _("{n} examples: {file}").format(n=len(rows), file=job_dir / PREDICTIONS_FILE)


def _read_done(job_dir: Path, rank: int) -> int:
    try:
        return int((job_dir / DONE.format(rank=rank)).read_text() or 0)
    except (OSError, ValueError):
        return 0


def merge_parts(job_dir: Path, world_size: int) -> list[dict[str, Any]]:
    """Every rank's answers in dataset order (a stopped job: the examples answered)."""
    rows = []
    for rank in range(world_size):
        path = job_dir / PART.format(rank=rank)
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    rows.append(json.loads(line))
                except ValueError:  # a line cut by a kill: that example was not finished
                    continue
    rows.sort(key=lambda r: r["index"])
    with open(job_dir / (PREDICTIONS_FILE + ".tmp"), "w", encoding="utf-8") as out:
        for r in rows:
            row = {"prompt": r["prompt"], "predict": r["predict"], "label": r["label"]}
            out.write(json.dumps(row | media_fields(r), ensure_ascii=False) + "\n")
    (job_dir / (PREDICTIONS_FILE + ".tmp")).replace(job_dir / PREDICTIONS_FILE)
    return rows


def media_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The files a prompt had: ``"images"`` and ``"videos"``, each only where it had some."""
    return {key: row[key] for key in ("images", "videos") if row.get(key)}


def write_results(job_dir: Path, rows: list[dict[str, Any]], total: int, elapsed: float, writer: EventWriter,
                  backend_name: str = "huggingface") -> dict[str, Any]:
    """predict_results.json: LLaMA-Factory's metric names (when the metric packages are
    installed), and how fast it went with which backend (``infer_backend``: examples/s and
    generated tokens/s are comparable between jobs of the same backend)."""
    from ftui.data.text_metrics import corpus_scores, metrics_unavailable

    results: dict[str, Any] = {}
    missing = metrics_unavailable()
    if missing:
        writer.write("log", level="warning", message=_("no BLEU / ROUGE scores: {why}").format(why=missing))
    elif rows:
        results.update(corpus_scores([(r["predict"], r["label"]) for r in rows]))
    tokens = sum(r.get("tokens", 0) for r in rows)
    results.update({
        "predict_samples": len(rows), "predict_total_samples": total, "predict_runtime": round(elapsed, 4),
        "predict_samples_per_second": round(len(rows) / elapsed, 3) if elapsed > 0 else None,
        "predict_tokens_per_second": round(tokens / elapsed, 3) if elapsed > 0 else None,
        "predict_generated_tokens": tokens, "complete": len(rows) == total, "infer_backend": backend_name,
    })
    results = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in results.items()}
    tmp = job_dir / (PREDICT_RESULTS_FILE + ".tmp")
    tmp.write_text(json.dumps(results, indent=2))
    tmp.replace(job_dir / PREDICT_RESULTS_FILE)
    writer.write("predict", **{k.replace("-", "_"): v for k, v in results.items()})
    return results
