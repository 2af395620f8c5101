"""LLaMA-Factory's predict metrics: BLEU-4 and ROUGE-1/2/L of generated text against labels.

The definitions are LLaMA-Factory 0.9.5's ``ComputeSimilarity`` (llamafactory/train/sft/metric.py),
reproduced call for call so that ftui's numbers equal LLaMA-Factory's on the same
``generated_predictions.jsonl`` (tests/data/llamafactory_predict holds its reference numbers):

- ROUGE-1/2/L: the F-scores of ``rouge_chinese.Rouge`` over the jieba segmentation of each text,
  joined by spaces; 0 when either side has no word after segmentation.
- BLEU-4: NLTK's ``sentence_bleu`` over *characters* (not words) with ``SmoothingFunction().method3``.
- Each is times 100 and rounded to 4 places per example; the corpus figure is the plain mean.

nltk, jieba and rouge-chinese are the optional extra ``ftui[predict]``: they are imported only
inside the functions that need them, so the app and CLI start without them, and this module never
imports torch (the import-linter contract covers it).
"""
from __future__ import annotations

import importlib
import logging
import math
import os
import warnings
from collections.abc import Iterable

from ftui.i18n import ngettext
from ftui.rundir.paths import ftui_home

METRICS = ("bleu-4", "rouge-1", "rouge-2", "rouge-l")
ROUGE_METRICS = ("rouge-1", "rouge-2", "rouge-l")
CORPUS_PREFIX = "predict_"  # LLaMA-Factory's metric_key_prefix for predict_results.json
INSTALL_HINT = "pip install 'ftui[predict]'"
# (module imported, distribution to install)
METRIC_PACKAGES = (("nltk", "nltk"), ("jieba", "jieba"), ("rouge_chinese", "rouge-chinese"))
JIEBA_CACHE_DIR = "cache"  # under FTUI_HOME


def metrics_unavailable() -> str | None:
    """Why the predict metrics cannot be computed here (which packages are missing and how to get
    them), else None. It imports the packages (~0.3 s for nltk): an installed but broken package
    is as unavailable as a missing one."""
    missing = [dist for module, dist in METRIC_PACKAGES if not _importable(module)]
    if not missing:
        return None
    return ngettext("BLEU/ROUGE need {packages}, which is not installed in this Python: {hint}",
                    "BLEU/ROUGE need {packages}, which are not installed in this Python: {hint}",
                    len(missing)).format(packages=", ".join(missing), hint=INSTALL_HINT)


def _importable(module: str) -> bool:
    try:
        _import_quietly(module)
    except ImportError:
        return False
    return True


def _import_quietly(module: str):
    """Import a metric package without its warnings reaching the terminal: jieba and
    rouge_chinese have regexes with invalid escapes (a SyntaxWarning on Python 3.12+ whenever
    their source is compiled, e.g. with no writable __pycache__), and jieba imports
    pkg_resources (a deprecation warning on recent setuptools)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(module)


def example_scores(predict: str, label: str) -> dict[str, float]:
    """One example's ``bleu-4``, ``rouge-1``, ``rouge-2`` and ``rouge-l`` (each 0..100, 4 places),
    exactly as LLaMA-Factory's ComputeSimilarity scores a decoded prediction against its label.
    The first call builds jieba's dictionary (about 1 s; cached under FTUI_HOME for the next
    process)."""
    bleu_score = _import_quietly("nltk.translate.bleu_score")
    rouge_chinese = _import_quietly("rouge_chinese")
    jieba = _quiet_jieba()
    hypothesis = list(jieba.cut(predict))
    reference = list(jieba.cut(label))
    scores: dict[str, float] = {}
    if len(" ".join(hypothesis).split()) == 0 or len(" ".join(reference).split()) == 0:
        rouge = {metric: {"f": 0.0} for metric in ROUGE_METRICS}
    else:
        rouge = rouge_chinese.Rouge().get_scores(" ".join(hypothesis), " ".join(reference))[0]
    for metric in ROUGE_METRICS:
        scores[metric] = float(round(rouge[metric]["f"] * 100, 4))
    bleu = bleu_score.sentence_bleu([list(label)], list(predict),
                                    smoothing_function=bleu_score.SmoothingFunction().method3)
    scores["bleu-4"] = float(round(bleu * 100, 4))  # sentence_bleu gives an int 0 for no match
    return scores


def mean_scores(per_example: Iterable[dict[str, float]]) -> dict[str, float]:
    """LLaMA-Factory's corpus figures (``predict_bleu-4``, ...): the mean of the per-example
    scores, already rounded, as its ComputeSimilarity._dump takes them. No examples, no figures:
    an empty dict (LLaMA-Factory would write NaN)."""
    rows = list(per_example)
    if not rows:
        return {}
    return {CORPUS_PREFIX + metric: math.fsum(row[metric] for row in rows) / len(rows) for metric in METRICS}


def corpus_scores(pairs: Iterable[tuple[str, str]]) -> dict[str, float]:
    """``predict_bleu-4``, ``predict_rouge-1``, ``predict_rouge-2``, ``predict_rouge-l`` of
    (predict, label) pairs, as LLaMA-Factory's predict_results.json has them."""
    return mean_scores(example_scores(predict, label) for predict, label in pairs)


_jieba_ready = False


def _quiet_jieba():
    """jieba, set up once: silent (it logs its dictionary build to stderr, and a traceback when it
    cannot write its cache) and caching under FTUI_HOME, this user's own and kept across reboots,
    rather than in the temp dir's jieba.cache, which all users share (and another may own)."""
    global _jieba_ready
    jieba = _import_quietly("jieba")

    if not _jieba_ready:
        jieba.setLogLevel(logging.CRITICAL)
        # else jieba's default, the system temp dir: writable where a home is read-only
        jieba.dt.tmp_dir = _jieba_cache_dir()
        _jieba_ready = True
    return jieba


def _jieba_cache_dir() -> str | None:
    """FTUI_HOME/cache when it exists or can be made and is writable, else None."""
    path = ftui_home() / JIEBA_CACHE_DIR
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return str(path) if os.access(path, os.W_OK) else None

