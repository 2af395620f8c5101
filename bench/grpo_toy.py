"""Benchmark: the grpo toy task's reward curve and speed on this machine.

The demo's tiny model, briefly fine-tuned on sums, trained with grpo to add two one-digit
numbers from a verifiable reward (tests/grpo_toy.py, the same run as
tests/test_grpo_toy.py). Records the reward, entropy and completion length of every step
event, and the steps per second of the grpo run (generation included), into
bench/results/grpo_toy_<device>.json.

Run: python bench/grpo_toy.py [--steps N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from benchlib import machine, record  # noqa: E402
from grpo_toy import GRPO_STEPS, SFT_STEPS, mean_reward, train_toy  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=GRPO_STEPS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        steps, _run = train_toy(Path(tmp), args.steps)
    seconds = sum(s["step_time_s"] * s["window_steps"] for s in steps)
    result = {
        "machine": machine(), "sft_steps": SFT_STEPS, "grpo_steps": args.steps,
        "steps_per_s": args.steps / seconds if seconds else None,
        "reward_first_30_steps": mean_reward(steps[:3]), "reward_last_30_steps": mean_reward(steps[-3:]),
        "curve": [{"step": s["step"], "reward": s["reward"], "entropy": s["entropy"],
                   "completion_length": s["completion_length"], "step_time_s": s["step_time_s"]} for s in steps],
    }
    print(record("grpo_toy_cpu", result))
    print(f"reward {result['reward_first_30_steps']:.3f} -> {result['reward_last_30_steps']:.3f}, "
          f"{result['steps_per_s']:.2f} steps/s")


if __name__ == "__main__":
    main()
