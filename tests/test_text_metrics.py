"""ftui's predict metrics (ftui/data/text_metrics.py) against LLaMA-Factory's own numbers.

The reference is LLaMA-Factory 0.9.5's ComputeSimilarity (llamafactory/train/sft/metric.py), run by
tests/data/llamafactory_predict/make_reference.py in a venv of its own over the English and Chinese
pairs of generated_predictions.jsonl there; reference.json holds its per-example scores and
its corpus means (predict_bleu-4, predict_rouge-1/2/l).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftui.data import text_metrics

REF_DIR = Path(__file__).parent / "data" / "llamafactory_predict"
REFERENCE = json.loads((REF_DIR / "reference.json").read_text(encoding="utf-8"))
PREDICTIONS = [json.loads(line) for line in (REF_DIR / "generated_predictions.jsonl").read_text(encoding="utf-8").splitlines()]
LF_TOLERANCE = 1e-4


def _pairs(lang: str | None = None) -> list[tuple[str, str]]:
    return [(row["predict"], row["label"]) for row, ex in zip(PREDICTIONS, REFERENCE["examples"])
            if lang is None or ex["lang"] == lang]


def test_reference_data_is_llamafactory_0_9_5():
    assert REFERENCE["versions"]["llamafactory"] == "0.9.5"
    assert len(PREDICTIONS) == len(REFERENCE["examples"])
    assert {ex["lang"] for ex in REFERENCE["examples"]} == {"en", "zh"}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_example_scores_as_llamafactory(lang):
    mismatches = []
    for row, ex in zip(PREDICTIONS, REFERENCE["examples"]):
        if ex["lang"] != lang:
            continue
        ours = text_metrics.example_scores(row["predict"], row["label"])
        assert set(ours) == set(text_metrics.METRICS)
        if any(abs(ours[m] - ex["scores"][m]) > LF_TOLERANCE for m in text_metrics.METRICS):
            mismatches.append((ex["name"], ours, ex["scores"]))
    assert not mismatches


@pytest.mark.parametrize("lang", ["en", "zh", "all"])
def test_corpus_scores_equal_llamafactory_predict_results(lang):
    ours = text_metrics.corpus_scores(_pairs(None if lang == "all" else lang))
    theirs = REFERENCE["corpus"][lang]
    assert set(ours) == set(theirs) == {"predict_bleu-4", "predict_rouge-1", "predict_rouge-2", "predict_rouge-l"}
    assert ours == pytest.approx(theirs, abs=LF_TOLERANCE)


def test_no_examples_no_corpus_figures():
    assert text_metrics.corpus_scores([]) == {}


def test_metrics_available_here():
    assert text_metrics.metrics_unavailable() is None


@pytest.mark.parametrize("module,dist", text_metrics.METRIC_PACKAGES)
def test_a_missing_package_is_named_with_the_install_command(monkeypatch, module, dist):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    why = text_metrics.metrics_unavailable()
    assert why is not None and dist in why and "pip install 'ftui[predict]'" in why
    others = [d for m, d in text_metrics.METRIC_PACKAGES if m != module]
    assert not any(d in why for d in others)


def _run_python(code: str, env: dict, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_the_module_imports_neither_torch_nor_the_metric_packages():
    """The app and CLI import it without the optional extra installed (and never torch)."""
    probe = ("import sys, ftui.data.text_metrics\n"
             "print([m for m in ('torch', 'transformers', 'nltk', 'jieba', 'rouge_chinese') if m in sys.modules])")
    proc = _run_python(probe, {})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


SCORE_ONE = ("from ftui.data.text_metrics import example_scores\n"
             "print(example_scores('北京是中国的首都。', '中国的首都是北京。')['rouge-l'])\n")


def test_jieba_is_silent_and_caches_under_ftui_home(tmp_path):
    home = tmp_path / "home"
    proc = _run_python(SCORE_ONE, {"FTUI_HOME": str(home), "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "66.6667" and proc.stderr == ""  # jieba logs its dictionary build to stderr
    assert (home / "cache" / "jieba.cache").is_file()


def test_jieba_works_where_ftui_home_cannot_be_written(tmp_path):
    """A read-only home: FTUI_HOME cannot be made (here: below a plain file, which stops root too);
    jieba falls back to the temp dir, still silent."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _run_python(SCORE_ONE, {"FTUI_HOME": str(blocker / "ftui"), "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "66.6667" and proc.stderr == ""


def test_the_metric_packages_warnings_stay_off_the_terminal(tmp_path):
    """jieba's and rouge_chinese's invalid regex escapes warn whenever their source is compiled
    (a SyntaxWarning that Python 3.12 shows by default): compiled afresh here (an empty pycache
    prefix) with every warning shown, scoring still prints nothing on stderr."""
    env = {"FTUI_HOME": str(tmp_path / "home"), "PYTHONPYCACHEPREFIX": str(tmp_path / "pyc")}
    proc = _run_python(SCORE_ONE, env, "-W", "default")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "66.6667" and proc.stderr == ""
