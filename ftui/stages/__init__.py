"""Each training stage described once, torch-free (and pydantic-free until its options'
sub-model is asked for): which records it reads, whether it packs, its own options with
the labels and help the launch form shows, whether it keeps a frozen reference model, its
rows per example, a value head, its figures, the planner's terms.

A new stage is one module here (its ``DESCRIPTION``) and its torch half, the module of the
same name in ``ftui/runner/stages/`` (docs/architecture.md, "Where to add").
"""

from ftui.stages.description import (CONVERSATIONS, DATA_KINDS, PACKING_NEVER, PACKING_OFF, PACKING_ON, PAIRS, RAW_TEXT,
                                     TAGGED_ANSWERS, PlannerTerms, StageDescription, StageOption, UnknownStage, always, never)
from ftui.stages.registry import (describe, descriptions, find, option_keys, plotted_first, refresh, stage_names,
                                  stages_reading)

__all__ = ["CONVERSATIONS", "DATA_KINDS", "PACKING_NEVER", "PACKING_OFF", "PACKING_ON", "PAIRS", "RAW_TEXT", "TAGGED_ANSWERS",
           "PlannerTerms", "StageDescription", "StageOption", "UnknownStage", "always", "never", "describe", "descriptions",
           "find", "option_keys", "plotted_first", "refresh", "stage_names", "stages_reading"]
