"""The options dpo and kto share (LLaMA-Factory's keys): one definition, listed by each."""

from ftui.i18n import N_
from ftui.stages.description import StageOption

PREF_BETA = StageOption("pref_beta", N_("beta (preference)"),
                        N_("dpo/kto: beta, how far the policy may move from the reference (higher: less)"), 0.1, gt=0.0)
PREF_FTX = StageOption("pref_ftx", N_("SFT loss weight (chosen)"),
                       N_("dpo/kto: weight of an SFT term on the chosen answer added to the preference loss"), 0.0, ge=0.0)
