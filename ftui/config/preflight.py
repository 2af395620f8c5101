"""The one check a config passes before a run starts: its schema, its rules, and the machine,
the model and the files it names, over one snapshot of the machine's facts and one read of
the model's config.json.

``preflight`` is what the launch form's validation worker and ``ftui train`` both call: the form
says ready exactly when ``ftui train`` would start. ``validate_config`` is the same without the
datasets' records (for the planner, ``ftui plan`` and a config checked as it is typed). A run's
own saved config is not checked here: ftui.config.load.read_run_config reads it with its
schema alone, on whatever machine reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ftui.config import file_checks, machine_checks, model_checks, reward_checks, rules, slurm_rules
from ftui.config.problems import STAND_INS, FieldProblem, pydantic_problems
from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.machine.facts import MachineFacts


@dataclass(frozen=True)
class Preflight:
    """A config's verdict: the config when it may start (None otherwise), every problem (each
    names its field and its fix) and the warnings that do not stop a start."""

    config: RunConfig | None
    problems: list[FieldProblem]
    warnings: list[str] = field(default_factory=list)
    model: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # config.json as read (the datasets' checks reuse it)

    @property
    def ready(self) -> bool:
        return self.config is not None


def preflight(data: dict[str, Any], facts: MachineFacts | None = None, data_needed: bool = True) -> Preflight:
    """The verdict on a new run's config (a mapping, as a YAML file or the form gives it):
    everything validate_config checks, then the datasets' files and first records.
    ``data_needed`` False: the data may be on another machine (``ftui plan --gpu-memory``)."""
    checked = check_config(data, facts)
    failed = {p.field for p in checked.problems}
    judged = checked.config or (_with_stand_ins(data, failed) if isinstance(data, dict) else None)
    if judged is None or failed & {"dataset", "eval_dataset", "dataset_dir", "stage", "config"}:
        return checked  # the datasets cannot be told apart from the fields that failed
    # a field that failed already is judged at its default (a stand-in): not complained of twice
    # the model as validation read it; none to judge the datasets against when it failed (a stand-in is judged)
    model = None if "model_name_or_path" in failed else checked.model if checked.model is not None else file_checks.UNREAD
    found = file_checks.dataset_problems(judged, data_needed, model)
    bad = {p.field for p in found}  # a dataset the checks refused already: its records' references are not judged
    found += [p for p in reward_checks.reward_data_problems(judged, data_needed) if p.field not in bad]
    problems = checked.problems + [p for p in found if p.field not in failed]
    return Preflight(None if problems else checked.config, problems, checked.warnings)


def validate_config(data: dict[str, Any], facts: MachineFacts | None = None) -> tuple[RunConfig | None, list[FieldProblem]]:
    """Validates a mapping against the schema, the rules, this machine (``facts``: one snapshot,
    gathered here when not given), the model and the files it names, but not the datasets'
    records (``preflight`` adds them); returns the config (or None) and every problem found."""
    checked = check_config(data, facts)
    return checked.config, checked.problems


def check_config(data: dict[str, Any], facts: MachineFacts | None = None) -> Preflight:
    """validate_config's verdict with its warnings."""
    if not isinstance(data, dict):
        return Preflight(None, [FieldProblem("config", data, _("expected a mapping of key: value"))])
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as err:
        problems = pydantic_problems(err, data)
        return Preflight(None, problems + _problems_of_the_rest(data, {p.field for p in problems}, facts))
    model = model_checks.read_model(cfg.model_name_or_path)
    problems = config_problems(cfg, facts or gather_facts(cfg), model)
    note = slurm_rules.skipped_machine_checks(cfg)
    return Preflight(None if problems else cfg, problems, model_checks.cutoff_warnings(cfg, model) + ([note] if note else []), model)


def gather_facts(cfg: RunConfig) -> MachineFacts:
    """This machine's facts for the config; under launcher slurm those of the compute nodes,
    unknown here (the checks that only this machine's GPUs decide are skipped: slurm_rules)."""
    if cfg.launcher == "slurm":
        from ftui.machine.facts import for_another_machine

        with for_another_machine():
            return MachineFacts.gather(None, cfg.nproc_per_node)
    return MachineFacts.gather(cfg.gpus, cfg.nproc_per_node)


def _with_stand_ins(data: dict[str, Any], failed: set[str]) -> RunConfig | None:
    """The config with the fields that failed at their defaults (required ones a stand-in), so
    that the fields that passed are still judged; None when even that does not validate."""
    rest = {k: v for k, v in data.items() if k not in failed} | {k: v for k, v in STAND_INS.items() if k in failed}
    try:
        return RunConfig.model_validate(rest)
    except ValidationError:
        return None


def _problems_of_the_rest(data: dict[str, Any], failed: set[str], facts: MachineFacts | None) -> list[FieldProblem]:
    """The problems of the fields that passed, so that every problem shows at once (a bad model
    path is flagged while the dataset is still empty): the failed fields take their defaults
    (required ones a stand-in) and their own rules are not reported."""
    cfg = _with_stand_ins(data, failed)
    if cfg is None:
        return []
    model_known = "model_name_or_path" not in failed
    model = model_checks.read_model(cfg.model_name_or_path) if model_known else None
    found = config_problems(cfg, facts or gather_facts(cfg), model, model_known)
    return [p for p in found if p.field not in failed]


def config_problems(cfg: RunConfig, facts: MachineFacts, model: dict[str, Any] | None, model_known: bool = True) -> list[FieldProblem]:
    """Every rule, machine, model and file check of a config that passed its schema, in the
    order the fields are told. ``model``: the model's config.json (None: not here);
    ``model_known`` False: the model is a stand-in for a missing one, so nothing is checked
    against it."""
    out = rules.field_rules(cfg)
    out += machine_checks.quantization_problems(cfg, facts)
    out += rules.engine_problems(cfg)
    out += file_checks.deepspeed_file_problems(cfg)
    out += machine_checks.deepspeed_problems(cfg, facts)
    if cfg.launcher != "slurm":  # Slurm gives the GPUs (slurm_rules refuses gpus)
        out += machine_checks.gpu_pick_problems(cfg, facts)
    out += machine_checks.device_problems(cfg, facts)
    out += machine_checks.flash_attn_problems(cfg, facts)
    out += rules.launch_rules(cfg)
    out += slurm_rules.slurm_problems(cfg)
    if model_known:
        out += model_checks.model_checks(cfg, model)
    out += rules.refused_key_problems(cfg)
    out += rules.unknown_key_problems(cfg)
    out += file_checks.output_dir_problems(cfg)
    out += rules.method_option_problems(cfg)
    out += machine_checks.optimizer_problems(cfg, facts)
    out += rules.data_option_problems(cfg)
    out += file_checks.saved_data_problems(cfg)
    out += rules.stage_problems(cfg)
    out += reward_checks.reward_config_problems(cfg)
    out += machine_checks.report_to_problems(cfg, facts)
    out += rules.run_name_rule(cfg)
    return out
