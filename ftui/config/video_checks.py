"""The preflight checks a dataset with videos adds to those of images (ftui.config.media_checks):
the run's machine must have torchvision, since transformers' video processors need it (the
runner refuses too, at its first video: ftui.runner.vision.videos); found with importlib's
find_spec, nothing imported. No torch here.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from ftui.config.problems import FieldProblem
from ftui.config.schema import RunConfig
from ftui.data.media import dataset_media
from ftui.data.records import DatasetSpec
from ftui.i18n import _


def has_torchvision() -> bool:
    return importlib.util.find_spec("torchvision") is not None


def video_problems(cfg: RunConfig, spec: DatasetSpec, key: str, first: Any = None) -> list[FieldProblem]:
    """A dataset with videos on a machine without torchvision."""
    if "videos" not in dataset_media(spec, first) or has_torchvision():
        return []
    return [FieldProblem(key, getattr(cfg, key), _(
        "the dataset {name} has videos, which need transformers' video processors and so torchvision, not installed here: "
        "install ftui[vision] (pip install 'ftui[vision]', with the torchvision build that matches your torch)").format(
        name=spec.name))]
