"""`ftui serve` under concurrent load (issue 44): requests/s, generated tokens/s, time to first
token (p50 / p95), 429s and the server's peak memory, with N chat requests, some streamed.

Starts a serve job the way `ftui serve --model PATH` does (ftui.jobs.serve_job.prepare_serve_job,
then ftui.jobs.launch.start_run: its own session, its events in the job directory) on a model
with random weights of a named shape (``--shape``: ``demo``, the built-in demo's size, default;
``qwen2.5-0.5b`` on a GPU; benchlib.SHAPES), waits for its ``serve_ready`` event, fires
``--requests`` chat completions from ``--concurrency`` clients, each sending its next when answered (every other one streamed)
with httpx (the GPU image has no openai client), then stops the job (Stop: SIGTERM) and reads
its last ``serve_stats``. The job batches the waiting requests (``--batch``, its max_batch:
8, 1 = one at a time); its queue (``--queue``) answers what it cannot hold with 429: they are
counted, waited out for their Retry-After and sent again. Random weights generate up to
``--max-tokens`` tokens of noise each; that is the point (a fixed amount of generation per request).

    python bench/serve_load.py                          # CPU, demo shape: bench/results/serve_load_cpu_demo.json
    python bench/serve_load.py --shape qwen2.5-0.5b --device auto --out gpu_out/serve_load.json
    python bench/serve_load.py --quick                  # a few requests, nothing recorded (the tests' smoke run)

Prints the JSON; records it under bench/results/ unless --quick or --no-record.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchlib import SHAPES, machine, model_dir, record  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="demo", help="the random model's shape (benchlib.SHAPES)")
    ap.add_argument("--requests", type=int, default=64, help="chat requests in all")
    ap.add_argument("--concurrency", type=int, default=8, help="clients at once, each sending its next request when answered "
                    "(at most the queue + the batch generating are taken at once: beyond, 429s, waited out and sent again)")
    ap.add_argument("--max-tokens", type=int, default=64, help="each request's max_tokens")
    ap.add_argument("--queue", type=int, default=8, help="the serve job's queue (more waiting: 429)")
    ap.add_argument("--batch", type=int, default=8, help="the serve job's max_batch: requests generated together (1: one at a time)")
    ap.add_argument("--device", default="cpu", help="cpu, or auto / cuda on a GPU machine")
    ap.add_argument("--ready-timeout", type=float, default=300.0, help="seconds to wait for serve_ready")
    ap.add_argument("--request-timeout", type=float, default=600.0, help="seconds one request may take")
    ap.add_argument("--out", default=None, help="also write the result JSON here")
    ap.add_argument("--tag", default="", help="suffix of the recorded result's name")
    ap.add_argument("--quick", action="store_true", help="8 requests, 4 at once, 8 tokens each: not recorded")
    ap.add_argument("--no-record", action="store_true", help="leave bench/results as it is")
    args = ap.parse_args(argv)
    if args.quick:
        args.requests, args.concurrency, args.max_tokens = 8, 4, 8
    for name in ("requests", "concurrency", "max_tokens"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be 1 or more")
    return args


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between the closest ranks; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(results: list[dict[str, Any]], elapsed: float) -> dict[str, Any]:
    """The client's figures over every request: ``results`` holds one dict each with ``status``
    (HTTP status, or 0 for a connection error), ``stream``, ``ttft_s`` (answered ones) and
    ``tokens`` (the answer's usage.completion_tokens) and ``rejected`` (the 429s it was answered
    before it got in: a rejected request is sent again after its Retry-After)."""
    answered = [r for r in results if r["status"] == 200]
    tokens = sum(int(r.get("tokens") or 0) for r in answered)
    ttft = [float(r["ttft_s"]) for r in answered if r.get("ttft_s") is not None]
    return {
        "requests": len(results), "answered": len(answered), "streamed": sum(1 for r in answered if r["stream"]),
        "rejected_429": sum(int(r.get("rejected") or 0) for r in results),
        "errors": sum(1 for r in results if r["status"] != 200),
        "seconds": round(elapsed, 3),
        "requests_per_s": round(len(answered) / elapsed, 3) if elapsed > 0 else None,
        "generated_tokens": tokens,
        "generated_tokens_per_s": round(tokens / elapsed, 2) if elapsed > 0 else None,
        "ttft_s_p50": _round(percentile(ttft, 50)), "ttft_s_p95": _round(percentile(ttft, 95)),
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def write_result(result: dict[str, Any], out: str | None) -> None:
    """The JSON on stdout, and in ``out`` when given (what a device call brings back)."""
    text = json.dumps(result, indent=1)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
    print(text)


def sse_data(line: str) -> dict[str, Any] | None:
    """One server-sent event line's chunk (``data: {...}``); None for other lines and ``[DONE]``."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if not payload or payload == "[DONE]":
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


# --- the load (needs the serve job: ftui.jobs.serve_job, the serve extra)

def build_model(folder: Path, shape: str) -> Path:
    """A model directory of the shape with random weights, written once (gpu_set.py's way)."""
    from gpu_set import save_random_weights

    mdir = model_dir(folder, **SHAPES[shape])
    save_random_weights(mdir)
    return mdir


def start_job(mdir: Path, root: Path, args: argparse.Namespace) -> Path:
    from ftui.config.schema import RunConfig
    from ftui.jobs.launch import start_run
    from ftui.jobs.serve_job import prepare_serve_job

    cfg = RunConfig(model_name_or_path=str(mdir), dataset="-", template="default", output_dir=str(root))
    job_dir, job_cfg = prepare_serve_job(run_dir=None, source={"model": str(mdir), "adapter": None}, model_config=cfg, root=root,
                                         served_name="bench", port=0, queue_size=args.queue, max_batch=args.batch,
                                         max_tokens_limit=max(args.max_tokens, 1), device=args.device)
    start_run(job_dir, job_cfg, job="serve")
    return job_dir


def events(job_dir: Path) -> list[dict[str, Any]]:
    path = job_dir / "events.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def wait_event(job_dir: Path, name: str, timeout: float) -> dict[str, Any]:
    """The job's first ``name`` event; RuntimeError with the job's end when it ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for e in events(job_dir):
            if e.get("event") == name:
                return e
            if e.get("event") == "run_end":
                raise RuntimeError(f"the serve job ended before {name}: {e.get('status')} {e.get('reason') or e.get('error') or ''}")
        time.sleep(0.2)
    raise RuntimeError(f"no {name} event in {timeout:.0f} s ({job_dir})")


class PeakRss(threading.Thread):
    """The serve job's processes' resident memory, summed, sampled every 0.2 s: its peak."""

    def __init__(self, job_dir: Path):
        super().__init__(daemon=True)
        self.job_dir, self.peak, self.done = job_dir, 0, threading.Event()

    def run(self) -> None:
        import psutil

        from ftui.jobs.launch import run_processes

        while not self.done.is_set():
            with contextlib.suppress(Exception):
                sup, children = run_processes(self.job_dir)
                procs = [p for p in [sup, *children] if p is not None]
                total = 0
                for p in procs:
                    with contextlib.suppress(psutil.Error):
                        total += p.memory_info().rss
                self.peak = max(self.peak, total)
            self.done.wait(0.2)


async def one_request(client: Any, url: str, n: int, stream: bool, max_tokens: int) -> dict[str, Any]:
    """One chat completion as a client that honours 429 does (the openai client retries them):
    each 429 is counted, waited out for its Retry-After (at most 5 s) and the request sent again.
    ``tokens`` is the answer's usage.completion_tokens (a streamed one asks for it with
    stream_options.include_usage); ``ttft_s`` from the last try's start."""
    body = {"model": "bench", "messages": [{"role": "user", "content": f"Request {n}: tell me about fine-tuning."}],
            "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    rejected = 0
    try:
        while True:
            started = time.perf_counter()
            if not stream:
                resp = await client.post(f"{url}/chat/completions", json=body)
                if resp.status_code == 429:
                    rejected += 1
                    await asyncio.sleep(retry_after(resp))
                    continue
                if resp.status_code != 200:
                    return {"status": resp.status_code, "stream": False, "rejected": rejected}
                usage = resp.json().get("usage") or {}
                return {"status": 200, "stream": False, "ttft_s": time.perf_counter() - started,
                        "tokens": usage.get("completion_tokens", 0), "rejected": rejected}
            first, tokens, status = None, 0, 0
            async with client.stream("POST", f"{url}/chat/completions", json=body) as resp:
                status = resp.status_code
                if status != 200:
                    await resp.aread()
                else:
                    async for line in resp.aiter_lines():
                        data = sse_data(line)
                        if data is None:
                            continue
                        if any((c.get("delta") or {}).get("content") for c in data.get("choices") or []):
                            first = first if first is not None else time.perf_counter() - started
                        tokens = (data.get("usage") or {}).get("completion_tokens", tokens)
            if status == 429:
                rejected += 1
                await asyncio.sleep(retry_after(resp))
                continue
            if status != 200:
                return {"status": status, "stream": True, "rejected": rejected}
            return {"status": 200, "stream": True, "ttft_s": first, "tokens": tokens, "rejected": rejected}
    except Exception as err:  # noqa: BLE001 (a connection error is a figure, not the end of the bench)
        return {"status": 0, "stream": stream, "error": f"{type(err).__name__}: {err}", "rejected": rejected}


def retry_after(resp: Any) -> float:
    """The 429's Retry-After in seconds, at most 5 (1 when it has none)."""
    try:
        return min(5.0, max(0.05, float(resp.headers.get("retry-after", "1"))))
    except ValueError:
        return 1.0


async def fire(url: str, args: argparse.Namespace) -> tuple[list[dict[str, Any]], float]:
    import httpx

    gate = asyncio.Semaphore(args.concurrency)
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx.AsyncClient(timeout=args.request_timeout, limits=limits) as client:
        async def gated(n: int) -> dict[str, Any]:
            async with gate:
                return await one_request(client, url, n, n % 2 == 1, args.max_tokens)

        started = time.perf_counter()
        results = await asyncio.gather(*(gated(n) for n in range(args.requests)))
        return list(results), time.perf_counter() - started


def stop_job(job_dir: Path, timeout: float = 120.0) -> dict[str, Any]:
    from ftui.jobs.launch import stop_run

    stop_run(job_dir)
    try:
        return wait_event(job_dir, "run_end", timeout)
    except RuntimeError as err:  # "ended before run_end" cannot happen; a stop that hangs is forced
        if "no run_end" in str(err):
            stop_run(job_dir, force=True)
        return {"status": "killed", "reason": str(err)}


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    mdir = build_model(tmp / "model", args.shape)
    job_dir = start_job(mdir, tmp / "runs", args)
    rss = PeakRss(job_dir)
    rss.start()
    try:
        start = wait_event(job_dir, "job_start", args.ready_timeout)
        ready = wait_event(job_dir, "serve_ready", args.ready_timeout)
        results, elapsed = asyncio.run(fire(str(ready["url"]).rstrip("/"), args))
    finally:
        end = stop_job(job_dir)
        rss.done.set()
        rss.join(timeout=5)
    stats = [e for e in events(job_dir) if e.get("event") == "serve_stats"]
    errors = sorted({r["error"] for r in results if r.get("error")})[:5]
    served = stats[-1].get("generated_tokens") if stats else None
    return {**summarize(results, elapsed), "peak_rss_bytes": rss.peak, "device": start.get("device"),
            "server_generated_tokens_per_s": round(served / elapsed, 2) if isinstance(served, (int, float)) and elapsed > 0 else None,
            "precision": start.get("precision"), "server_stats": stats[-1] if stats else None,
            "run_end": {"status": end.get("status"), "reason": end.get("reason")}, "client_errors": errors}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ftui-serve-load-") as tmp:
        figures = measure(args, Path(tmp))
    result = {"bench": "serve_load", "shape": args.shape, "requests": args.requests, "concurrency": args.concurrency,
              "max_tokens": args.max_tokens, "queue": args.queue, "max_batch": args.batch, "machine": machine(), **figures,
              "finished": figures["run_end"]["status"] == "stopped"}
    write_result(result, args.out)
    if not (args.quick or args.no_record):
        record(f"serve_load_{'cpu' if args.device == 'cpu' else 'gpu'}_{args.shape}{args.tag}", result)
    return 0 if result["answered"] else 1


if __name__ == "__main__":
    sys.exit(main())
