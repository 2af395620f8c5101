"""Loss curves of SFT under single, DDP, FSDP and ZeRO-2 on the CPU (2 gloo ranks), fixed
seed, written to the last digit: run it before and after a refactor and compare.

    python bench/loss_parity.py --out bench/results/loss_parity_X.json
    python bench/loss_parity.py --compare bench/results/loss_parity_X.json   (exit 1 on any difference)
    python bench/loss_parity.py --compare X.json --rel 1e-5   (a change of arithmetic: within a relative tolerance)

``--rel`` is for a change that computes the same math in another order (padding-free batches:
other matrix shapes, so other fp32 summation orders): each value may differ by ``rel`` times
its size (plus 1e-7 for a value near 0, a grad norm); the largest relative difference of each
case is printed either way.

Prints the curves as JSON; ``--quick`` runs the single-device case for 2 steps only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from conftest import tiny_config, train_sync  # noqa: E402

CASES = {
    "single-full": dict(engine="single", finetuning_type="full", nproc_per_node=1),
    "single-lora": dict(engine="single", finetuning_type="lora", nproc_per_node=1, learning_rate=1e-2),
    "ddp-full": dict(engine="ddp", finetuning_type="full", nproc_per_node=2),
    "fsdp-full": dict(engine="fsdp", finetuning_type="full", nproc_per_node=2),
    "zero2-full": dict(engine="zero2", finetuning_type="full", nproc_per_node=2),
}


def curves(cases: list[str], steps: int = 8) -> dict[str, dict[str, list[str]]]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in cases:
            cfg = tiny_config(Path(tmp) / name, max_steps=steps, val_size=0.25, eval_steps=max(1, steps // 2), **CASES[name])
            run_dir, events, proc = train_sync(cfg, timeout=900)
            if proc.returncode != 0:
                raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
            out[name] = {
                "loss": [repr(e["loss"]) for e in events if e["event"] == "step"],
                "grad_norm": [repr(e["grad_norm"]) for e in events if e["event"] == "step"],
                "eval_loss": [repr(e["eval_loss"]) for e in events if e["event"] == "eval"],
            }
            print(name, out[name]["loss"][-1], file=sys.stderr, flush=True)
    return out


def largest_difference(got: dict[str, list[str]], want: dict[str, list[str]]) -> float | None:
    """The largest ``|a - b| / (|b| + 1e-7 / rel-scale)`` over every value of a case's curves,
    None when the curves differ in length (a case that stopped early or ran more steps)."""
    worst = 0.0
    for key in want:
        a, b = got.get(key, []), want[key]
        if len(a) != len(b):
            return None
        for x, y in zip(a, b):
            x, y = float(x), float(y)
            worst = max(worst, max(0.0, abs(x - y) - 1e-7) / max(abs(y), 1e-12))
    return worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--compare")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rel", type=float, default=0.0, help="relative tolerance of --compare (default 0: to the last digit)")
    args = ap.parse_args()
    got = curves(["single-full"], steps=2) if args.quick else curves(args.cases.split(","))
    print(json.dumps(got))
    if args.out and not args.quick:
        Path(args.out).write_text(json.dumps(got, indent=1))
    if args.compare:
        want = json.loads(Path(args.compare).read_text())
        worst = {k: largest_difference(got[k], want[k]) for k in got if k in want}
        print("largest relative difference per case:", json.dumps(worst), file=sys.stderr)
        bad = [k for k in got if k not in want or worst[k] is None or worst[k] > args.rel]
        for k in bad:
            print(f"DIFFERENT {k}:\n  before {want.get(k)}\n  after  {got[k]}", file=sys.stderr)
        print("identical" if not bad else f"{len(bad)} case(s) differ", file=sys.stderr)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
