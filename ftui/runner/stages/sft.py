"""Supervised fine-tuning (``stage: sft``): conversations rendered with a chat template, the
loss on the assistant's turns, token for token as LLaMA-Factory 0.9.5 makes its examples.

With a named ``template`` (``ftui.presets.templates``) each record becomes a conversation
(``ftui.data.records.to_conversation``) that ``ftui.data.conversation.Renderer`` encodes turn by turn;
with none, the tokenizer's own chat template renders it and the assistant's turns are found
by rendering prefix by prefix. Either way the turns pair up (prompt, answer) and
``ftui.data.conversation.assemble`` fits them in ``cutoff_len`` pair by pair (a long prompt is cut,
not the example dropped), masks prompts (``train_on_prompt``: not) and, with
``mask_history``, learns only the last answer. Short examples can be packed into full rows.

A record with images (a vision-language model, a template with an image encoding) goes through
``ftui.runner.vision``: its placeholders expanded to the images' tokens before the template
renders it, its example carrying the processor's tensors (``Example.media``); text records of
the same run are encoded as above. A record with audios (Qwen2-Audio, template qwen2_audio) goes
through ``ftui.runner.audio`` the same way.
"""

from __future__ import annotations

from typing import Any

from ftui.data.conversation import ConversationError, EncodeOptions, Encoded, Renderer, assemble
from ftui.i18n import _
from ftui.data.records import DataFormatError, DatasetSpec, to_conversation, to_messages
from ftui.runner.data import IGNORE, Example, Progress, TokenizedData, join_media_row, pack_examples
from ftui.runner.hub import model_source
from ftui.runner.model import model_config, template_name_for
from ftui.runner.stages.base import Stage
from ftui.runner.audio.encode import AudioEncoded, AudioEncoder, audio_encoder
from ftui.runner.vision.encode import MediaEncoded, VisionEncoder, vision_encoder
from ftui.data.media import media_columns, record_media


def encode_options(cfg: Any) -> EncodeOptions:
    return EncodeOptions(
        cutoff_len=cfg.cutoff_len, train_on_prompt=cfg.train_on_prompt, mask_history=cfg.mask_history,
        default_system=cfg.default_system, enable_thinking=cfg.enable_thinking, tool_format=cfg.tool_format,
    )


class SFTStage(Stage):
    name = "sft"
    _vision: VisionEncoder | AudioEncoder | None = None  # made at the first record with images (audios: Qwen2-Audio)

    def encode(self, loaded: list[tuple[DatasetSpec, list[dict[str, Any]]]], out: TokenizedData,
               report: Progress) -> list[Example]:
        cfg = self.cfg
        encode = self.record_encoder()
        examples: list[Example] = []
        skipped = 0
        for spec, records in loaded:
            for i, record in enumerate(records):
                out.records += 1
                report.tick(out.records)
                try:
                    enc = encode(record, spec, i)
                except ConversationError as err:
                    raise DataFormatError(_("dataset {name} record {i}: {error}").format(name=repr(spec.name), i=i, error=err)) from None
                if enc is None:
                    skipped += 1
                    continue
                out.truncated += enc.truncated
                if all(label == IGNORE for label in enc.labels[1:]):
                    out.dropped += 1
                    continue
                if isinstance(enc, (MediaEncoded, AudioEncoded)):
                    self.check_image_tokens(enc, spec, i)
                examples.append(Example(enc.input_ids, enc.labels, real_tokens=len(enc.input_ids),
                                        media=enc.media if isinstance(enc, (MediaEncoded, AudioEncoded)) else None))
        if skipped:
            out.warnings.append(_("{n} conversations were skipped: their turns do not alternate user/observation and "
                                  "assistant/function, ending with an answer (as LLaMA-Factory skips them)").format(n=skipped))
        if out.truncated:
            out.warnings.append(_("{n} of {total} examples were longer than cutoff_len={cutoff_len} and were cut (prompt and "
                                  "answer of each turn shared out as LLaMA-Factory does)").format(
                n=out.truncated, total=out.records, cutoff_len=cfg.cutoff_len))
        if out.dropped:
            out.warnings.append(_("{n} examples had no answer tokens left within cutoff_len and were dropped").format(n=out.dropped))
        if not examples:
            raise DataFormatError(_("no usable examples: all {n} lost their answer to cutoff_len={cutoff_len}; raise "
                                    "cutoff_len").format(n=out.records, cutoff_len=cfg.cutoff_len))
        return examples

    def record_encoder(self) -> Any:
        """record, spec, index -> Encoded (None: a conversation LLaMA-Factory would skip)."""
        opts = encode_options(self.cfg)
        name = template_name_for(self.cfg, self.tokenizer)
        if name is not None:
            try:
                renderer = Renderer(name, self.tokenizer, opts)
            except ConversationError as err:
                raise DataFormatError(str(err)) from None

            def by_template(record: Any, spec: DatasetSpec, i: int) -> Encoded | None:
                conv = to_conversation(record, spec, i)
                if conv is None:
                    return None
                media = self.media_of(record, spec, i)
                if media.get("audios"):
                    if media.get("images") or media.get("videos"):
                        raise DataFormatError(_("dataset {name} record {i} has images or videos and audios; ftui trains one medium per "
                                                "model (Qwen2-Audio reads audios only)").format(name=repr(spec.name), i=i))
                    return self.audio_encoder(renderer, name).encode(conv, media["audios"], spec, i)
                if media.get("images") or media.get("videos"):
                    return self.vision_encoder(renderer, name).encode(conv, media.get("images", []), spec, i,
                                                                      media.get("videos", []))
                return renderer.encode(conv)

            return by_template
        encoder = Encoder(self.tokenizer, self.tokenizer.chat_template, opts)

        def by_chat_template(record: Any, spec: DatasetSpec, i: int) -> Encoded | None:
            messages, tools = to_messages(record, spec, i)
            media = self.media_of(record, spec, i)
            if media.get("audios"):
                self.audio_encoder(None, None)  # refuses, naming the template to use
            if media.get("images") or media.get("videos"):
                self.vision_encoder(None, None)  # refuses, naming the template to use
            return encoder.encode(messages, tools)

        return by_chat_template

    @staticmethod
    def media_of(record: Any, spec: DatasetSpec, i: int) -> dict[str, list[str]]:
        """The record's media files per medium (none for a dataset without media columns)."""
        if not media_columns(spec, record):
            return {}
        return record_media(record, spec, i)

    @staticmethod
    def prompt_media(record: Any, spec: DatasetSpec, i: int) -> dict[str, list[str]]:
        """The record's image and video files for predict (``{"images": [...], "videos": [...]}``,
        empty lists where it has none); audios are refused by name."""
        media = SFTStage.media_of(record, spec, i)
        if media.get("audios"):
            raise DataFormatError(_("dataset {name} record {i} has audios: predicting or chatting with audios is not supported "
                                    "yet (ftui trains Qwen2-Audio with stage sft); use a dataset without audios").format(
                name=repr(spec.name), i=i))
        return {"images": media.get("images", []), "videos": media.get("videos", [])}

    def audio_encoder(self, renderer: Renderer | None, template: str | None) -> AudioEncoder:
        """The run's audio encoder (ftui.runner.audio.encode), made at the first record with audios."""
        if not isinstance(self._vision, AudioEncoder):
            model_dir = model_source(self.cfg.model_name_or_path)
            model_type = model_config(self.cfg).get("model_type")
            self._vision = audio_encoder(renderer, template, model_type, model_dir, self.cfg)  # type: ignore[arg-type,assignment]
        return self._vision

    def vision_encoder(self, renderer: Renderer | None, template: str | None) -> VisionEncoder:
        """The run's image encoder, made at the first record with images."""
        if self._vision is None:
            model_dir = model_source(self.cfg.model_name_or_path)
            model_type = model_config(self.cfg).get("model_type")
            self._vision = vision_encoder(renderer, template, model_type, model_dir, self.cfg)  # type: ignore[arg-type]
        return self._vision

    def check_image_tokens(self, enc: MediaEncoded | AudioEncoded, spec: DatasetSpec, i: int) -> None:
        """Refuses an example whose image tokens cutoff_len cut (LLaMA-Factory keeps it, and
        its model fails in the first step: ftui.runner.vision.encode)."""
        assert self._vision is not None  # it encoded enc
        missing = self._vision.missing_image_tokens(enc)
        if missing and isinstance(enc, AudioEncoded):
            raise DataFormatError(_("dataset {name} record {i}: its audios take {tokens} tokens and cutoff_len={cutoff_len} cuts "
                                    "{missing} of them, which the model cannot train on; raise cutoff_len").format(
                name=repr(spec.name), i=i, tokens=enc.image_tokens, cutoff_len=self.cfg.cutoff_len, missing=missing))
        if missing:
            raise DataFormatError(_("dataset {name} record {i}: its images take {tokens} tokens and cutoff_len={cutoff_len} cuts {missing} "
                                    "of them, which the model cannot train on; raise cutoff_len or lower image_max_pixels "
                                    "(now {max_pixels})").format(
                name=repr(spec.name), i=i, tokens=enc.image_tokens, cutoff_len=self.cfg.cutoff_len, missing=missing,
                max_pixels=self._vision.settings.max_pixels))
        missing = self._vision.missing_video_tokens(enc) if enc.video_tokens else 0
        if missing:
            raise DataFormatError(_("dataset {name} record {i}: its videos take {tokens} tokens and cutoff_len={cutoff_len} cuts {missing} "
                                    "of them, which the model cannot train on; raise cutoff_len, or lower video_max_pixels, "
                                    "video_fps or video_maxlen").format(
                name=repr(spec.name), i=i, tokens=enc.video_tokens, cutoff_len=self.cfg.cutoff_len, missing=missing))

    def pack(self, train: list[Example]) -> list[Example]:
        """Rows of several examples with ``packing``; examples with images keep theirs, in order
        (``ftui.runner.media_packing``)."""
        if not self.cfg.packing:
            return train
        if any(ex.media for ex in train):
            return pack_examples(train, self.cfg.cutoff_len, join_media_row)
        return pack_examples(train, self.cfg.cutoff_len)


class Encoder:
    """Renders messages with the tokenizer's own (Jinja) chat template and splits the tokens
    into (prompt, answer) pairs at the assistant's turns."""

    def __init__(self, tokenizer: Any, template: str, options: EncodeOptions | None = None):
        self.tokenizer = tokenizer
        self.template = template
        self.options = options or EncodeOptions(cutoff_len=1 << 30)

    def render(self, messages: list[dict[str, str]], tools: Any = None, generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, chat_template=self.template, tokenize=False,
            add_generation_prompt=generation_prompt, enable_thinking=self.options.enable_thinking,
        )

    def with_default_system(self, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        system = self.options.default_system
        if system is None or (messages and messages[0]["role"] == "system"):
            return messages
        return [{"role": "system", "content": system}] + messages

    def encode(self, messages: list[dict[str, str]], tools: Any = None) -> Encoded:
        return assemble(self.encode_pairs(messages, tools), self.options)

    def encode_oneturn(self, messages: list[dict[str, str]], tools: Any = None) -> tuple[list[int], list[int]]:
        """(prompt ids, answer ids): everything before the last answer is the prompt."""
        pairs = self.encode_pairs(messages, tools)
        if pairs and not pairs[-1][1]:  # tokens after the last answer (a template's closing text) are not an answer
            pairs = pairs[:-1]
        return [tid for p, a in pairs[:-1] for tid in p + a] + pairs[-1][0], pairs[-1][1]

    def encode_pairs(self, messages: list[dict[str, str]], tools: Any = None) -> list[tuple[list[int], list[int]]]:
        messages = self.with_default_system(messages)
        full = self.render(messages, tools)
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            prefix = self.render(messages[:i], tools, generation_prompt=True)
            upto = self.render(messages[: i + 1], tools)
            if not (upto.startswith(prefix) and full.startswith(upto)):
                raise DataFormatError(_("the chat template does not render conversations prefix by prefix, so prompt tokens "
                                        "cannot be masked; choose a built-in template (template: qwen, llama3, ...)"))
            spans.append((len(prefix), len(upto)))
        enc = self.tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
        return self.pairs(enc["input_ids"], enc["offset_mapping"], spans)

    @staticmethod
    def pairs(ids: list[int], offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[tuple[list[int], list[int]]]:
        """(prompt, answer) token pairs: each answer is the tokens starting inside an assistant
        span, its prompt the tokens since the previous answer; tokens after the last answer
        form a last pair with no answer (never learnt)."""
        out: list[tuple[list[int], list[int]]] = []
        prompt: list[int] = []
        answer: list[int] = []
        s = 0
        for tid, (start, _end) in zip(ids, offsets):
            while s < len(spans) and start >= spans[s][1]:
                if answer or prompt:
                    out.append((prompt, answer))
                prompt, answer = [], []
                s += 1
            (answer if s < len(spans) and spans[s][0] <= start else prompt).append(tid)
        if prompt or answer:
            out.append((prompt, answer))
        return out
