"""What the launch form renders from a dataset or a config, off the UI thread: the first
records as the stage reads them, the answer's parts, the command that trains it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from ftui.i18n import _
from ftui.safety.text import visible
from ftui.stages import PAIRS, find as find_stage

if TYPE_CHECKING:
    from ftui.config.problems import FieldProblem
    from ftui.config.schema import RunConfig



PREVIEW_ERROR_CHARS = 600
PREVIEW_RECORDS = 32  # records the first-example render encodes (pt packs several documents into a block)


def _apart_if_not_found(problem: "FieldProblem", data: dict[str, Any]) -> "FieldProblem":
    """A dataset name found neither in the registry nor as a file is said by the preview in its
    own place, as the form always did (a 100 KB paste is shortened there): Start stays off, and
    the problem is listed under the form, not under the field, which keeps the registry's
    and the records' problems."""
    from ftui.config.problems import FieldProblem
    from ftui.data.registry import dataset_path_problem

    if problem.field not in ("dataset", "eval_dataset") or not isinstance(problem.value, str):
        return problem
    where = (str(data.get("dataset_dir") or "data"), data.get("stage") if isinstance(data.get("stage"), str) else None)
    if dataset_path_problem(problem.value, *where) is None and dataset_path_problem(problem.value, *where, unresolved=True) == problem.message:
        return FieldProblem(_("{key} (not found)").format(key=problem.field), problem.value, problem.message)
    return problem


def _shorten(text: str, n: int) -> str:
    """Like _clip, but keeps the line breaks (a record error spans lines)."""
    return text if len(text) <= n else text[:n] + "… " + _("({n} characters)").format(n=f"{len(text):,}")


def answer_parts(answer: str, stage: str) -> list[str]:
    """A record's answers as the preview lists them: a preference pair's chosen and rejected
    answer on lines of their own (preference_records.comparison_preview), else the answer."""
    described = find_stage(stage)
    if described is not None and described.data == PAIRS and "\nrejected: " in answer:
        chosen, rejected = answer.split("\nrejected: ", 1)
        return [chosen, "rejected: " + rejected]  # the column names: not translated
    return [answer] if answer else []


def _clip(text: str, n: int) -> str:
    """A record's text on one line of at most ``n`` characters: its control characters shown
    as escapes (a ``\\r`` or ``\\x1b`` in a dataset is not obeyed), its whitespace as spaces."""
    text = " ".join(visible(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def command_text(cfg: "RunConfig", yaml_path: str | None, saved: bool) -> str:
    """What F6 shows: a command the user can copy and run as it is, then the launch command
    `ftui train` runs (with the run directory it will create)."""
    import shlex

    from ftui.jobs.launch import launch_command
    from ftui.rundir.paths import SLURM_SCRIPT_FILE

    where = shlex.quote(str(Path(yaml_path).expanduser().absolute())) if yaml_path is not None else ""
    if saved and yaml_path is not None:
        head = f"ftui train {where}"
    elif yaml_path is not None:
        head = _("The form differs from {path}: save the form first (F4), then run").format(path=yaml_path) + f"\n  ftui train {where}"
    else:
        head = _("save the form first (F4), e.g. to ftui_config.yaml, then run") + "\n  ftui train ftui_config.yaml"
    name = cfg.run_name or f"{Path(cfg.model_name_or_path).name}-{cfg.method}"
    run_dir = Path(cfg.output_dir) / f"{name}-<timestamp>"
    if cfg.launcher == "slurm":  # no command runs here: a batch script is submitted (its srun starts each node's ranks)
        script = shlex.quote(str(run_dir / SLURM_SCRIPT_FILE))
        return head + "\n\n" + _("For reference: it writes the batch script {script} and submits it with sbatch; "
                                   "ftui train {config} --slurm --dry-run prints the script without submitting it").format(
            script=script, config=where or "ftui_config.yaml") + "\n  sbatch --parsable " + script
    reference = _("For reference, what it launches (the run directory is created at start):")
    return f"{head}\n\n{reference}\n{shlex.join(launch_command(cfg, run_dir))}"


def records_preview(dataset: str, dataset_dir: str, stage: str = "sft") -> tuple[Text, str | None]:
    """The Data group's preview: the first records of the first two datasets as read (or why
    they cannot be), and why the data does not fit the stage (None when it does). Reads files:
    call it from a worker. The Evaluate & Predict screen shows the same."""
    from ftui.data.dataset_files import HubDataset, read_records
    from ftui.data.records import DataFormatError
    from ftui.data.registry import resolve_datasets
    from ftui.data.stage_formats import check_format, record_preview

    text = Text()
    fit_problem = None
    try:
        specs = resolve_datasets(dataset, dataset_dir) if dataset.strip() else []
        for spec in specs[:2]:
            try:
                records = read_records(spec, limit=3)
            except HubDataset:
                text.append(_("{name}: hub dataset, loaded when the run starts").format(name=visible(spec.name, one_line=True)) + "\n",
                            style="dim")
                continue
            if not records:
                raise DataFormatError(_("dataset {name} has no records").format(name=repr(spec.name)))
            try:
                kind = check_format(spec, records[0], stage)
            except DataFormatError as err:  # the dataset does not fit the stage: the field's problem too
                fit_problem = str(err)
                raise
            text.append(visible(f"{spec.name}: {kind}", one_line=True) + "\n", style="bold")
            for i, r in enumerate(records):
                prompt, answer = record_preview(r, spec, i, stage)
                text.append(f"  {i + 1}. ", style="dim")
                text.append(_clip(prompt, 60 if answer else 120))
                for k, part in enumerate(answer_parts(answer, stage)):
                    text.append(" → " if k == 0 else "\n     ", style="dim")
                    text.append(_clip(part, 60))
                text.append("\n")
    except (DataFormatError, OSError, ValueError) as err:
        text = Text(_shorten(visible(err), PREVIEW_ERROR_CHARS), style="red")  # a pasted 100 KB name is in the message
    return text, fit_problem
