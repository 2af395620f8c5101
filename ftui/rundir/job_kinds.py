"""Job kinds, described once: what each job writes, how it is followed, what the readers show.

A job is a detached process tree laid out as a run directory (config.yaml, launch.json,
events.jsonl, train.log, job.lock), so the one launcher, supervisor, Stop, ``attach`` and
``watch`` serve every kind. Training is the run directory itself; every other kind gets a
directory of its own inside the run (``RUN/predict/ID``, ``RUN/eval/ID``, ``RUN/export/ID``, ``RUN/serve/ID``:
the names are ``ftui.rundir.paths``'). Its first event names its kind (``job_start``; a
training job's ``run_start``), and every reader (``ftui train``'s display, ``ftui watch``, the
runs list, the job screens, deleting a run) asks this registry how that kind reads.

A new job kind is one :class:`JobKind` entry in :data:`KINDS` and its runner
module (``ftui/runner/NAME.py``, with its line in ``ftui.runner.__main__.JOBS``, which a test
checks against :attr:`JobKind.runner`). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ftui.i18n import N_, _
from ftui.rundir.events import TRAIN_JOB
from ftui.rundir.formats import fmt_export, fmt_predict
from ftui.rundir.paths import EVAL_DIR, EXPORT_DIR, PREDICT_DIR, SERVE_DIR
from ftui.rundir.serve_events import fmt_serve_ready, fmt_serve_stats

if TYPE_CHECKING:
    from ftui.rundir.summary import RunSummary

STEPS, EXAMPLES, PHASES = "steps", "examples", "phases"  # what a kind's progress counts
SERVING = "serving"  # ... or nothing: it runs until stopped (no bar, no ETA; its status lines say what it did)


def _train_line(e: dict[str, Any]) -> str:
    return _("{model} · {method} · {engine} · {precision} · {world_size} process(es) · "
             "{trainable} of {total} parameters train").format(
        model=e.get("model"), method=e.get("method"), engine=e.get("engine"), precision=e.get("precision"),
        world_size=e.get("world_size"), trainable=f"{e.get('trainable_params') or 0:,}", total=f"{e.get('total_params') or 0:,}")


def _examples_line(e: dict[str, Any]) -> str:
    examples = e.get("examples") if isinstance(e.get("examples"), int) else None
    return _("{job}: {source} on {dataset}, {examples} examples · {device} · {precision} · {world_size} process(es)").format(
        job=e.get("job"), source=e.get("source"), dataset=e.get("dataset"), examples=examples,
        device=e.get("device"), precision=e.get("precision"), world_size=e.get("world_size"))


def _serve_line(e: dict[str, Any]) -> str:
    return _("serving {source} on {host}:{port} · {device} · {precision}").format(
        source=e.get("source"), host=e.get("host"), port=e.get("port"), device=e.get("device"), precision=e.get("precision"))


def _export_line(e: dict[str, Any]) -> str:
    return _("exporting {source} as {precision} to {out}").format(source=e.get("source"), precision=e.get("precision"), out=e.get("out"))


# ``ftui watch``'s first line: key names as events.jsonl and the config spell them (the same
# in every language), after the run's id
def _train_head(e: dict[str, Any]) -> str:
    return (f"{e.get('model')} {e.get('method')} {e.get('engine')} {e.get('precision')} "
            f"world_size={e.get('world_size')} max_steps={e.get('max_steps')}")


def _examples_head(e: dict[str, Any]) -> str:
    return f"{e.get('job')} {e.get('source')} {e.get('precision')} dataset={e.get('dataset')} examples={e.get('examples')}"


def _export_head(e: dict[str, Any]) -> str:
    return f"{e.get('job')} {e.get('source')} {e.get('precision')} out={e.get('out')}"


def _serve_head(e: dict[str, Any]) -> str:
    return f"{e.get('job')} {e.get('source')} {e.get('precision')} host={e.get('host')} port={e.get('port')}"


@dataclass(frozen=True)
class JobKind:
    """One kind of job, as everything outside the runner knows it."""

    name: str  # the word in job_start's ``job``, ``python -m ftui.runner NAME`` and job.json
    dir_name: str | None  # its directories inside the run (RUN/DIR/ID); None: the run directory itself
    runner: str  # "module:function" of one rank (ftui.runner.__main__.JOBS has the same line)
    what: str  # N_: what it does, in a line (help, the screens' choices)
    counts: str  # what its progress counts: STEPS (step events), EXAMPLES or PHASES (progress events)
    bar: str  # N_: the figures beside ``ftui train``'s bar (fields: loss, tps, eta); "" for none
    start_line: Callable[[dict[str, Any]], str]  # its start event as ``ftui train``'s display says it
    watch_head: Callable[[dict[str, Any]], str]  # ... and as ``ftui watch``'s first line does
    result_event: str | None = None  # the event that carries its results, shown under the bar and by watch
    result_line: Callable[[dict[str, Any]], str] | None = None
    results_under_bar: bool = False  # ``ftui train``'s display prints them once the bar has finished
    shows_eval: bool = True  # its eval events are printed as they come (an eval job's scores are its end line)
    status_event: str | None = None  # an event it writes again and again (a serve job's counters) ...
    status_line: Callable[[dict[str, Any]], str] | None = None  # ... printed as this line whenever the line changes

    @property
    def trains(self) -> bool:
        """It has optimizer steps: the end line says the step, the runs list its method."""
        return self.counts == STEPS

    @property
    def counted(self) -> bool:
        """Its progress is a count towards a total (steps, examples): a bar, an ETA, N/M in the runs list."""
        return self.counts in (STEPS, EXAMPLES)

    def method_cell(self, summary: "RunSummary") -> str:
        """The runs list's method column: a training run's method, else the job's kind."""
        return (summary.method if self.trains else self.name) or "-"

    def bar_figures(self, stats: dict[str, str]) -> str:
        return _(self.bar).format(**stats) if self.bar else ""


KINDS: dict[str, JobKind] = {k.name: k for k in (
    JobKind(TRAIN_JOB, None, "ftui.runner.train:main", N_("fine-tune a model (the run itself)"), STEPS,
            N_("loss {loss}  {tps} tok/s  ETA {eta}"), _train_line, _train_head),
    JobKind("predict", PREDICT_DIR, "ftui.runner.predict:main",
            N_("generate a model's answers to a dataset's prompts and score them (BLEU-4, ROUGE) as LLaMA-Factory does"),
            EXAMPLES, N_("{tps} tok/s  ETA {eta}"), _examples_line, _examples_head, "predict", fmt_predict,
            results_under_bar=True),
    JobKind("eval", EVAL_DIR, "ftui.runner.evaluate:main",
            N_("a model's eval loss and perplexity over datasets (reward accuracy for preference stages, mean reward for grpo)"),
            EXAMPLES, N_("ETA {eta}"), _examples_line, _examples_head, shows_eval=False),
    JobKind("export", EXPORT_DIR, "ftui.runner.export:main", N_("a standalone model directory from a run's weights"),
            PHASES, "", _export_line, _export_head, "export", fmt_export),
    JobKind("serve", SERVE_DIR, "ftui.runner.serve:main", N_("an OpenAI-compatible API over a run's model (until stopped)"),
            SERVING, "", _serve_line, _serve_head, "serve_ready", fmt_serve_ready, status_event="serve_stats",
            status_line=fmt_serve_stats),
)}


def job_kind(name: str | None) -> JobKind:
    """The kind a job's start event (RunSummary.job) names; a name no entry has (a newer
    ftui's job) reads as a job that counts examples, under its own name."""
    if name in KINDS:
        return KINDS[name]
    return JobKind(str(name), None, "", "", EXAMPLES, N_("ETA {eta}"), _examples_line, _examples_head)


def offline_kinds() -> list[JobKind]:
    """The kinds that run in a directory of their own inside a run (all but training)."""
    return [k for k in KINDS.values() if k.dir_name is not None]


def job_dirs(run_dir: Path) -> list[Path]:
    """Every job directory of a run (RUN/KIND/ID for each offline kind), oldest first per kind."""
    out: list[Path] = []
    for kind in offline_kinds():
        try:
            out += sorted(p for p in (run_dir / kind.dir_name).iterdir() if p.is_dir())
        except OSError:
            continue
    return out
