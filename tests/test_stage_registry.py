"""Each stage described once (ftui.stages, torch-free) and implemented once (ftui.runner.stages):
both registries hold the same stages, the descriptions agree with RunConfig's fields, and a new
stage is one description module and one runner module: a stage added from this test's own two
modules, found the way the built-in ones are, is accepted by the config, offered by the form and
trains, on batches it generates (the loop's batch-source seam)."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import tiny_config

import ftui.stages
from ftui.stages import PAIRS, describe, descriptions, plotted_first, stage_names

BUILT_IN = ("sft", "pt", "dpo", "kto", "rm", "grpo", "ppo")


def test_the_built_in_stages_in_llamafactorys_order():
    assert stage_names() == BUILT_IN


def test_both_registries_hold_the_same_stages():
    """Every description has its Stage subclass (named as it, reporting its figures), and every
    Stage subclass a runner module defines with a name implements a description."""
    from ftui.runner.stages import Stage, stages

    implemented = stages()
    assert tuple(implemented) == stage_names()
    for name, cls in implemented.items():
        assert issubclass(cls, Stage) and cls.name == name
    import ftui.runner.stages as runner_stages

    named = set()
    for info in pkgutil.iter_modules(runner_stages.__path__, runner_stages.__name__ + "."):
        module = importlib.import_module(info.name)
        named |= {c.name for c in vars(module).values() if isinstance(c, type) and issubclass(c, Stage) and c.name}
    assert named == set(stage_names())


def test_the_stages_options_are_runconfigs_fields_as_they_are():
    """A stage's options describe RunConfig's fields (LLaMA-Factory's keys), not rename them: the
    same default, and the sub-model takes and refuses what RunConfig takes and refuses."""
    from pydantic import ValidationError

    from ftui.config.schema import RunConfig

    for d in descriptions().values():
        model = d.options_model()
        assert list(model.model_fields) == list(d.option_keys)
        for o in d.options:
            if o.key not in RunConfig.model_fields:  # a newer stage's own key (grpo's): its sub-model alone validates it
                continue
            field = RunConfig.model_fields[o.key]
            assert field.default == o.default, o.key
            assert model.model_fields[o.key].title == o.label and model.model_fields[o.key].description == o.help
            probes = [o.default, True] + ([v for v, _what in o.choices] + ["bogus"] if o.choices else
                                         [b + delta for b in o.bounds.values() for delta in (-1e-3, 0.0, 1e-3)])
            for value in probes:
                def accepted(validate) -> bool:
                    try:
                        validate(value)
                    except ValidationError:
                        return False
                    return True

                by_config = accepted(lambda v: RunConfig.model_validate({"model_name_or_path": "m", "dataset": "d", o.key: v}))
                assert accepted(lambda v: model.model_validate({o.key: v})) == by_config, (d.name, o.key, value)


def test_the_form_lists_each_option_once_for_the_stages_that_have_it():
    from ftui.tui.screens.launch_fields import FIELDS, FORM_DEFAULTS, option_labels

    assert FIELDS["pref_beta"].stages == ("dpo", "kto") and FIELDS["pref_loss"].stages == ("dpo",)
    assert FIELDS["kto_chosen_weight"].stages == ("kto",)
    assert [v for _label, v in option_labels(FIELDS["stage"])] == list(BUILT_IN)
    assert option_labels(FIELDS["pref_loss"])[0] == ("sigmoid: DPO", "sigmoid")
    assert {FORM_DEFAULTS[o.key] for o in describe("dpo").options} == {o.default for o in describe("dpo").options}


def test_what_the_app_reads_from_the_descriptions():
    from ftui.tui.state import ordered_figures

    assert describe("rm").value_head and not describe("dpo").value_head
    assert describe("dpo").needs_reference({"pref_loss": "sigmoid"}) and not describe("dpo").needs_reference({"pref_loss": "simpo"})
    assert describe("kto").needs_reference({}) and not describe("sft").needs_reference({})
    assert describe("dpo").data == describe("rm").data == PAIRS
    assert plotted_first() == ("rewards_margin", "rewards_accuracy", "reward", "completion_length", "value_loss")
    assert ordered_figures(["kl", "eval_rewards_accuracy", "rewards_margin"]) == ["rewards_margin", "eval_rewards_accuracy", "kl"]
    assert describe("sft").eval_figures == ("eval_loss", "eval_perplexity")
    assert describe("kto").eval_figures == ("eval_loss", "eval_rewards_accuracy", "eval_rewards_margin", "eval_kl")


def test_the_descriptions_load_without_pydantic_or_torch():
    """The launch form draws the stages before its first frame, which builds no pydantic model."""
    probe = ("import sys\nfrom ftui.stages import descriptions\nd = descriptions()\n"
             "print(len(d), sorted(m for m in ('pydantic', 'torch', 'ftui.config.schema') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split(maxsplit=1)
    assert out == ["7", "[]\n"], out


# --- A new stage: one description module and one runner module, nothing else edited ---

TOY_DESCRIPTION = '''
    """A test's stage: conversations, a loss weight of its own, batches it generates."""
    from ftui.stages import CONVERSATIONS, StageDescription, StageOption

    DESCRIPTION = StageDescription(
        name="toy", order=90, short="toy (a test's stage)", help="toy: generated rows, loss on every token",
        data=CONVERSATIONS,
        options=(StageOption("toy_weight", "toy loss weight", "the toy loss is multiplied by it", 1.0, gt=0.0),),
        figures=("generated",), plotted_first=("generated",),
    )
'''
TOY_RUNNER = '''
    """The toy stage's torch half: SFT's data, but the loop trains on rows it generates."""
    from ftui.runner.data import Example
    from ftui.runner.stages.base import GeneratedBatches, MicroLoss
    from ftui.runner.stages.sft import SFTStage

    MARK = 7  # every token of a generated row


    class ToyStage(SFTStage):
        name = "toy"

        def batches(self, t, start):
            rows = [Example([MARK] * 12, [MARK] * 12, real_tokens=12) for _row in range(2)]
            return GeneratedBatches(lambda index: t.collator(rows), t.device, start)

        def loss(self, model, batch, autocast):
            out = super().loss(model, batch, autocast)
            weight = self.description.read_options(self.cfg).toy_weight
            return MicroLoss(out.total * weight, {"generated": (batch.labels[:, 1:] == MARK).sum().float()})
'''


def write_toy_stage(root: Path) -> tuple[Path, Path]:
    described, implemented = root / "described", root / "implemented"
    for folder, text in ((described, TOY_DESCRIPTION), (implemented, TOY_RUNNER)):
        folder.mkdir(parents=True)
        (folder / "toy.py").write_text(textwrap.dedent(text))
    return described, implemented


@pytest.fixture
def toy_stage(tmp_path, monkeypatch):
    """The toy stage's two modules, in folders on the two packages' paths (where a stage's
    modules are looked for), as a plugin would add them."""
    import ftui.runner.stages as runner_stages

    described, implemented = write_toy_stage(tmp_path / "toy")
    monkeypatch.setattr(ftui.stages, "__path__", [*ftui.stages.__path__, str(described)])
    monkeypatch.setattr(runner_stages, "__path__", [*runner_stages.__path__, str(implemented)])
    ftui.stages.refresh()
    yield described, implemented
    monkeypatch.undo()
    ftui.stages.refresh()
    for name in ("ftui.stages.toy", "ftui.runner.stages.toy"):
        sys.modules.pop(name, None)


def test_a_new_stage_is_one_description_module_and_one_runner_module(toy_stage, tmp_path):
    from ftui.config.preflight import validate_config
    from ftui.jobs.launch import prepare_run
    from ftui.rundir.event_reader import read_all
    from ftui.tui.screens.launch_fields import FIELDS, option_labels, stage_option_fields

    described, implemented = toy_stage
    assert stage_names() == BUILT_IN + ("toy",)

    # the config accepts it, and its own option, which its sub-model validates
    cfg = tiny_config(tmp_path, stage="toy", toy_weight=0.5, max_steps=2, logging_steps=1)
    assert cfg.stage == "toy" and describe("toy").read_options(cfg).toy_weight == 0.5
    _cfg, problems = validate_config(cfg.model_dump() | {"toy_weight": -1.0})
    assert [p.field for p in problems] == ["toy_weight"] and "greater than 0" in problems[0].message
    _cfg, problems = validate_config(cfg.model_dump() | {"stage": "sft"})  # another stage keeps the key, as the form does
    assert not problems

    # the form offers it, and its option's field while it is chosen
    assert ("toy: toy (a test's stage)", "toy") in option_labels(FIELDS["stage"])
    (toy_field,) = [f for f in stage_option_fields() if f.key == "toy_weight"]
    assert toy_field.stages == ("toy",) and toy_field.label == "toy loss weight"

    # ... and a form built with the stage there from the start (as a new module of ftui/stages is) has its field
    probe = ("import ftui.stages\n"
             f"ftui.stages.__path__.append({str(described)!r})\n"
             "ftui.stages.refresh()\n"
             "from ftui.tui.screens.launch_fields import FIELDS, FORM_DEFAULTS, form_to_config\n"
             "print(FIELDS['toy_weight'].stages, FORM_DEFAULTS['toy_weight'], [v for _l, v in FIELDS['stage'].options][-1],\n"
             "      form_to_config({'stage': 'toy', 'toy_weight': '0.25'})['toy_weight'],\n"
             "      'toy_weight' in form_to_config({'stage': 'sft', 'toy_weight': '0.25'}))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["('toy',)", "1.0", "toy", "0.25", "False"], out.stdout + out.stderr[-2000:]

    # one short run: the runner finds the stage as it finds the built-in ones
    run = prepare_run(cfg).resolve()
    script = ("import sys\nimport ftui.stages, ftui.runner.stages\n"
              f"ftui.stages.__path__.append({str(described)!r})\n"
              f"ftui.runner.stages.__path__.append({str(implemented)!r})\n"
              "ftui.stages.refresh()\n"
              "from ftui.runner.train import main\n"
              f"sys.exit(main([{str(run)!r}]))\n")
    from ftui.jobs.torch_env import torch_process_env

    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=torch_process_env())
    events = read_all(run / "events.jsonl")
    assert proc.returncode == 0 and events[-1]["event"] == "run_end", proc.stderr[-3000:]
    assert events[-1]["status"] == "completed", json.dumps(events[-1])[:2000]
    start = next(e for e in events if e["event"] == "run_start")
    assert start["stage"] == "toy"
    steps = [e for e in events if e["event"] == "step"]
    # every labelled token of both steps was a generated row's: the steps ran on the generated batches
    assert [s["step"] for s in steps] == [1, 2] and all(s["generated"] == 1.0 for s in steps), steps
    assert (run / "final").is_dir()
