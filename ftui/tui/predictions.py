"""A predict job's examples as the Evaluate & Predict screen browses and compares them:
read from ``generated_predictions.jsonl``, scored one by one (BLEU-4, ROUGE-L), filtered,
sorted worst-first, and paired with another job's. No Textual, no torch: plain data, tested
on its own. Every text here came from a dataset or a model: :func:`visible` is how it is shown.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from rich.text import Text

from ftui.i18n import _
from ftui.rundir.paths import EVAL_RESULTS_FILE, PREDICT_RESULTS_FILE, PREDICTIONS_FILE
from ftui.safety.text import visible  # the one rule for untrusted text; imported here by its old name's users

SCORES = ("bleu-4", "rouge-l")  # each example's own figures the browser shows
RESULTS_MAX = 1 << 20  # a results file is a few hundred bytes: more is not one ftui wrote


@dataclass
class Example:
    index: int  # the example's place in the dataset (0-based)
    prompt: str
    predict: str
    label: str
    scores: dict[str, float] = field(default_factory=dict)  # empty until scored

    def matches(self, query: str) -> bool:
        """Whether the prompt, label or prediction holds ``query`` (case-insensitive)."""
        q = query.casefold()
        return not q or any(q in text.casefold() for text in (self.prompt, self.label, self.predict))


@dataclass
class Pair:
    """One example answered by two jobs (A and B), for the comparison."""

    index: int
    a: Example
    b: Example

    def delta(self, metric: str) -> float | None:
        if metric not in self.a.scores or metric not in self.b.scores:
            return None
        return self.b.scores[metric] - self.a.scores[metric]

    def matches(self, query: str) -> bool:
        return self.a.matches(query) or self.b.matches(query)


def clip(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` cells with an ellipsis (a CJK character takes two)."""
    line = Text(visible(text, one_line=True))
    line.truncate(width, overflow="ellipsis")
    return line.plain


def read_predictions(job_dir: Path) -> list[Example]:
    """The job's examples in dataset order. Raises OSError (no file yet) and ValueError (a line
    that is not a prediction) with a message that names the file."""
    path = Path(job_dir) / PREDICTIONS_FILE
    rows = []
    if not path.is_file():
        raise OSError(_("{path} is not there yet: a predict job writes it when it ends (a stopped one too)").format(path=path))
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError:
                raise ValueError(_("{path}: line {line} is not JSON").format(path=path, line=n + 1)) from None
            if not isinstance(data, dict):
                raise ValueError(_("{path}: line {line} is not a prediction record").format(path=path, line=n + 1))
            rows.append(Example(len(rows), *(_as_text(data.get(k)) for k in ("prompt", "predict", "label"))))
    return rows


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else json.dumps(value, ensure_ascii=False)


def score_examples(rows: list[Example], scorer: Callable[[str, str], dict[str, float]] | None = None,
                   cancelled: Callable[[], bool] = lambda: False, every: int = 200,
                   progress: Callable[[int], None] | None = None) -> bool:
    """Fills each example's scores (``text_metrics.example_scores``, about 1 ms each);
    ``progress(done)`` every ``every`` examples. False when cancelled before the end."""
    if scorer is None:
        from ftui.data.text_metrics import example_scores as scorer
    for n, row in enumerate(rows, 1):
        if cancelled():
            return False
        row.scores = scorer(row.predict, row.label)
        if progress is not None and n % every == 0:
            progress(n)
    return True


def sort_key(metric: str | None) -> Callable[[Any], tuple]:
    """Dataset order (None), else the metric ascending (worst first; unscored last, then by index).
    Works for examples (their score) and pairs (B minus A)."""
    def key(item: Any) -> tuple:
        if metric is None:
            return (0, 0.0, item.index)
        value = item.delta(metric) if isinstance(item, Pair) else item.scores.get(metric)
        return (value is None, 0.0 if value is None else value, item.index)
    return key


def shown(items: Iterable[Any], query: str, metric: str | None) -> list[Any]:
    """The items that match ``query``, in the order ``metric`` sorts them."""
    return sorted((i for i in items if i.matches(query)), key=sort_key(metric))


def pair_examples(a: list[Example], b: list[Example]) -> tuple[list[Pair], int]:
    """Both jobs' answers to the same examples, by dataset index (a stopped job has fewer), and
    how many of those have different labels (then they are not the same data: the caller says so)."""
    pairs = [Pair(x.index, x, y) for x, y in zip(a, b)]
    return pairs, sum(p.a.label != p.b.label for p in pairs)


def read_results(job_dir: Path, kind: str) -> dict[str, Any]:
    """predict_results.json / eval_results.json: only its numbers, strings and booleans ({}
    when absent or not a results file)."""
    path = Path(job_dir) / (PREDICT_RESULTS_FILE if kind == "predict" else EVAL_RESULTS_FILE)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            data = json.loads(fh.read(RESULTS_MAX))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, (int, float, str, bool)) and not _bad_float(v)}


def _bad_float(v: Any) -> bool:
    return isinstance(v, float) and not math.isfinite(v)


PREDICT_FIGURES = ("predict_bleu-4", "predict_rouge-1", "predict_rouge-2", "predict_rouge-l")


def metric_deltas(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, float | None, float | None, float | None]]:
    """(name, A, B, B - A) for the four predict figures, a missing one as None."""
    out = []
    for name in PREDICT_FIGURES:
        x, y = _number(a.get(name)), _number(b.get(name))
        out.append((name.removeprefix("predict_"), x, y, None if x is None or y is None else y - x))
    return out


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def throughput_line(results: dict[str, Any]) -> str | None:
    """How fast a predict job went and with which backend ("huggingface: 3.20 examples/s, 41.5
    tokens/s"): comparable between jobs of one backend. None for a results file without them."""
    rate, tokens = _number(results.get("predict_samples_per_second")), _number(results.get("predict_tokens_per_second"))
    if rate is None and tokens is None:
        return None
    backend = results.get("infer_backend")
    name = visible(backend, one_line=True)[:32] if isinstance(backend, str) and backend else "huggingface"  # written before the key: transformers
    figures = [f"{rate:.2f} " + _("examples/s")] if rate is not None else []
    figures += [f"{tokens:.1f} " + _("tokens/s")] if tokens is not None else []
    return f"{name}: " + ", ".join(figures)


def result_lines(results: dict[str, Any]) -> list[tuple[str, str]]:
    """A results file's fields as (name, value) to show: figures with 2 places (4 for a loss)."""
    lines = []
    for key, value in results.items():
        if key in ("source", "dataset"):
            continue
        if isinstance(value, float):
            value = f"{value:.4f}" if "loss" in key or "perplexity" in key else f"{value:.2f}"
        lines.append((key, str(value)))
    return lines
