"""A supervised record with audios, encoded as LLaMA-Factory 0.9.5's Qwen2AudioPlugin and
supervised processor encode it (``mm_plugin.py``, template qwen2_audio): each ``<audio>``
placeholder, in order over the turns, becomes ``<|audio_bos|>`` + ``<|AUDIO|>`` x n +
``<|audio_eos|>`` with n from the audio's length (``ftui.data.audio_files.audio_tokens``, the
plugin's arithmetic over the feature extractor's attention mask); the template renders the
turns and ``cutoff_len`` is shared out as for text.

An example keeps its audios as files and sample counts (``ExampleAudios``), like images: each
file is decoded and resampled whole here (an undecodable file is named with its record before
training) and its samples dropped; the collator decodes them again per micro batch and runs
the feature extractor (``input_features`` [audios, mel bins, 3000], ``feature_attention_mask``
[audios, 3000], LLaMA-Factory's ``_get_mm_inputs``: ``padding="max_length"``, the attention
mask returned and renamed). A file whose length changed since encoding is named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ftui.data.audio_files import AudioFileError, audio_tokens
from ftui.data.conversation import Conversation, ConversationError, Encoded, Renderer
from ftui.data.records import DataFormatError, DatasetSpec
from ftui.i18n import _
from ftui.presets.vision_families import VisionFamily, vision_family
from ftui.runner.audio.decode import regularize_audio

AUDIO_PLACEHOLDER = "<audio>"  # LLaMA-Factory's AUDIO_PLACEHOLDER


@dataclass
class AudioEncoded(Encoded):
    """An example with audios: its ids and labels, its files, and the audio tokens before
    cutoff_len (``image_tokens``: the name the sft stage's check reads, as of MediaEncoded)."""
    media: "ExampleAudios | None" = None
    image_tokens: int = 0


@dataclass(eq=False)
class AudioReader:
    """What turns audio files into the model's tensors, one per run."""
    feature_extractor: Any
    sampling_rate: int  # the run's audio_sampling_rate

    def samples(self, path: str) -> Any:
        return regularize_audio(path, self.sampling_rate)

    def features(self, waves: list[Any]) -> dict[str, torch.Tensor]:
        out = self.feature_extractor(waves, sampling_rate=self.sampling_rate, return_attention_mask=True,
                                     padding="max_length", return_tensors="pt")
        return {"input_features": out["input_features"], "feature_attention_mask": out["attention_mask"]}

    def tensors(self, audios: "ExampleAudios") -> dict[str, torch.Tensor]:
        waves = []
        for path, length in zip(audios.paths, audios.samples):
            try:
                wave = self.samples(path)
            except AudioFileError as err:
                raise DataFormatError(_("the audio file {path} could be read when the dataset was encoded but not now ({error}); "
                                        "restore the file and start the run again").format(path=path, error=err.problem)) from None
            if len(wave) != length:
                raise DataFormatError(_("the audio file {path} changed since the dataset was encoded: it now has {now} samples, "
                                        "not {encoded}, so its example's audio tokens no longer match it; restore the file, or "
                                        "start the run again").format(path=path, now=len(wave), encoded=length))
            waves.append(wave)
        return self.features(waves)


@dataclass(frozen=True, eq=False)
class ExampleAudios:
    """An example's audios as ``Example.media`` holds them until its batch is collated."""
    paths: tuple[str, ...]
    samples: tuple[int, ...]  # each file's length at the run's sampling rate
    reader: AudioReader

    def tensors(self) -> dict[str, torch.Tensor]:
        return self.reader.tensors(self)


def expand_audio(turns: list[dict[str, str]], texts: list[str]) -> list[dict[str, str]]:
    """The turns with each ``<audio>`` replaced by its audio's text, in order over the turns."""
    found = sum(turn["content"].count(AUDIO_PLACEHOLDER) for turn in turns)
    if found != len(texts):
        raise ConversationError(_("it has {audios} audios but {found} {mark} placeholders in its messages; each audio needs one "
                                  "placeholder where it goes").format(audios=len(texts), found=found, mark=AUDIO_PLACEHOLDER))
    out, k = [], 0
    for turn in turns:
        parts = turn["content"].split(AUDIO_PLACEHOLDER)
        content = parts[0]
        for part in parts[1:]:
            content, k = content + texts[k] + part, k + 1
        out.append({**turn, "content": content})
    return out


def audio_token_names(model_dir: str) -> tuple[str, str, str]:
    """(bos, audio, eos): the folder's Qwen2AudioProcessor settings, or its defaults."""
    path = Path(model_dir) / "processor_config.json"
    numbers = json.loads(path.read_text()) if path.is_file() else {}
    return (numbers.get("audio_bos_token", "<|audio_bos|>"), numbers.get("audio_token", "<|AUDIO|>"),
            numbers.get("audio_eos_token", "<|audio_eos|>"))


class AudioEncoder:
    """Records with audios -> ids, labels and ``ExampleAudios``, for Qwen2-Audio."""

    def __init__(self, renderer: Renderer, family: VisionFamily, reader: AudioReader, tokens: tuple[str, str, str]):
        self.renderer, self.family, self.reader = renderer, family, reader
        self.bos, self.audio_token, self.eos = tokens
        self.audio_token_id = renderer.tokenizer.convert_tokens_to_ids(self.audio_token)

    def encode(self, conv: Conversation, paths: list[str], spec: DatasetSpec, index: int) -> AudioEncoded:
        lengths = []
        for path in paths:
            try:
                lengths.append(len(self.reader.samples(path)))
            except AudioFileError as err:
                raise DataFormatError(_("dataset {name} record {i}: the audio file {path} cannot be decoded ({error}); replace "
                                        "the file or drop the record").format(name=repr(spec.name), i=index, path=path,
                                                                              error=err.problem)) from None
        counts = [audio_tokens(n) for n in lengths]
        turns = expand_audio(conv.turns, [self.bos + self.audio_token * n + self.eos for n in counts])
        enc = self.renderer.encode(Conversation(turns, conv.system, conv.tools))
        return AudioEncoded(enc.input_ids, enc.labels, enc.truncated, media=ExampleAudios(tuple(paths), tuple(lengths), self.reader),
                            image_tokens=sum(counts))

    def missing_image_tokens(self, enc: AudioEncoded) -> int:
        """How many of the example's audio tokens ``cutoff_len`` cut (0: all there): the name
        VisionEncoder's check has, which the sft stage calls."""
        return enc.image_tokens - sum(1 for tid in enc.input_ids if tid == self.audio_token_id)


def audio_encoder(renderer: Renderer, template: str | None, model_type: str | None, model_dir: str, cfg: Any) -> AudioEncoder:
    """The encoder of a run whose records have audios, or a DataFormatError saying why not."""
    from transformers import AutoFeatureExtractor

    family = vision_family(model_type)
    if family is None or "audios" not in family.media:
        raise DataFormatError(_("the dataset has audios, but the model {model} (model_type {model_type}) does not read audio; "
                                "use a Qwen2-Audio model").format(model=cfg.model_name_or_path, model_type=model_type))
    if template != family.template:
        raise DataFormatError(_("the dataset has audios, but template {template} has no audio encoding for this model; use "
                                "template: {wanted} (LLaMA-Factory's for Qwen2-Audio)").format(
            template=template or _("(the tokenizer's own)"), wanted=family.template))
    try:
        extractor = AutoFeatureExtractor.from_pretrained(model_dir)
    except (OSError, ValueError, KeyError) as err:
        raise DataFormatError(_("the model {model} has no audio feature extractor ftui can load ({error}); an audio model "
                                "folder needs its preprocessor_config.json").format(model=model_dir, error=err)) from None
    if int(cfg.audio_sampling_rate) != int(extractor.sampling_rate):
        raise DataFormatError(_("audio_sampling_rate {rate} differs from the rate the model's feature extractor was trained at "
                                "({wanted} Hz), which it refuses (as in LLaMA-Factory); set audio_sampling_rate: {wanted}").format(
            rate=cfg.audio_sampling_rate, wanted=extractor.sampling_rate))
    return AudioEncoder(renderer, family, AudioReader(extractor, int(cfg.audio_sampling_rate)), audio_token_names(model_dir))

