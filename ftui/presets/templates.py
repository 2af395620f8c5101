"""Named chat templates, as data: LLaMA-Factory 0.9.5's formats, token for token.

Used when the RunConfig names a ``template`` (LLaMA-Factory's key); with none, a model's
tokenizer renders conversations with its own chat template. ``ftui.data.conversation`` is the one
renderer that turns a conversation into token ids with an entry of this table.

Each turn of a conversation is rendered from a **slot**: a tuple of pieces, each one

- a string, where ``{{content}}`` is replaced by the turn's text (``{{idx}}`` by the
  user turn's number); each string piece is tokenized on its own, so where a piece ends
  matters (``("{{content}}", EOS, "\\n\\n")`` is three pieces, as LLaMA-Factory has it);
- ``BOS`` / ``EOS``: the tokenizer's BOS / EOS token id (left out where it has none);
- ``Token("<|user|>")``: that token's id, looked up in the vocabulary rather than tokenized.

The first turn is preceded by ``prefix`` and, when there is a system prompt or tools, the
``system`` slot filled with the system prompt plus the tool descriptions (``tool_format``).
With ``system_in_user`` (LLaMA-2 style) the system text goes inside the first user turn.

To add a template: one ``Template(...)`` entry in TEMPLATES below; only the fields that
differ from the defaults need writing (assistant: the text then EOS; function calls: the
assistant slot; observations: the user slot; system: the bare text). If it uses a tool-call
syntax not in ``ftui.data.conversation.TOOL_FORMATS``, add a formatter there. Check it against
LLaMA-Factory with tests/data/llamafactory_templates/make_reference.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass(frozen=True)
class Special:
    """The tokenizer's BOS or EOS token (by id, as the tokenizer has it after the template's fix-up)."""

    which: str  # "bos" or "eos"


@dataclass(frozen=True)
class Token:
    """One vocabulary token by its text, looked up (never tokenized)."""

    text: str


BOS = Special("bos")
EOS = Special("eos")
Piece = Union[str, Special, Token]
Slot = tuple[Piece, ...]

THINK = ("<think>\n", "\n</think>\n\n")


@dataclass(frozen=True)
class Template:
    """One chat format. ``None`` slots take their defaults in ``__post_init__`` (see the module doc)."""

    user: Slot = ("{{content}}",)
    assistant: Slot | None = None  # default: ("{{content}}", EOS), or ("{{content}}",) with efficient_eos
    system: Slot = ("{{content}}",)
    function: Slot | None = None  # an assistant's tool call; default: the assistant slot
    observation: Slot | None = None  # a tool's answer; default: the user slot
    prefix: Slot = ()
    default_system: str = ""
    stop_words: tuple[str, ...] = ()
    # The EOS token becomes stop_words[0] (added to the vocabulary if missing); the other stop
    # words are added as special tokens.
    replace_eos: bool = False
    # The assistant slot has no EOS; one EOS ends the whole example instead (and, in the
    # labels, stands in for the first token of each later prompt).
    efficient_eos: bool = False
    tool_format: str = "default"  # a key of ftui.data.conversation.TOOL_FORMATS
    reasoning: bool = False  # thinking blocks: enable_thinking decides whether they are learnt
    thought_words: tuple[str, str] = THINK
    tool_call_words: tuple[str, str] = ("<tool_call>", "</tool_call>")
    system_in_user: bool = False  # the system text is put inside the first user turn (LLaMA-2 style)
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.assistant is None:
            object.__setattr__(self, "assistant", ("{{content}}",) if self.efficient_eos else ("{{content}}", EOS))
        if self.function is None:
            object.__setattr__(self, "function", self.assistant)
        if self.observation is None:
            object.__setattr__(self, "observation", self.user)


_CHATML_USER = "<|im_start|>user\n{{content}}<|im_end|>\n<|im_start|>assistant\n"
_CHATML_ASSISTANT = "{{content}}<|im_end|>\n"
_CHATML_SYSTEM = "<|im_start|>system\n{{content}}<|im_end|>\n"
_QWEN_OBSERVATION = "<|im_start|>user\n<tool_response>\n{{content}}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
_GEMMA_USER = "<start_of_turn>user\n{{content}}<end_of_turn>\n<start_of_turn>model\n"
_GEMMA_OBSERVATION = "<start_of_turn>tool\n{{content}}<end_of_turn>\n<start_of_turn>model\n"
_LLAMA3_USER = "<|start_header_id|>user<|end_header_id|>\n\n{{content}}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
_LLAMA4_USER = "<|header_start|>user<|header_end|>\n\n{{content}}<|eot|><|header_start|>assistant<|header_end|>\n\n"


def _qwen(default_system: str = "", reasoning: bool = False, tool_format: str = "qwen") -> Template:
    """Qwen 2 / 2.5 / 3 / 3.5: ChatML, tool answers as a user turn in <tool_response>."""
    return Template(
        user=(_CHATML_USER,), assistant=(_CHATML_ASSISTANT,), system=(_CHATML_SYSTEM,),
        function=(_CHATML_ASSISTANT,), observation=(_QWEN_OBSERVATION,), default_system=default_system,
        stop_words=("<|im_end|>",), replace_eos=True, tool_format=tool_format, reasoning=reasoning,
    )


def _gemma(stop_words: tuple[str, ...], **kw: bool) -> Template:
    return Template(
        user=(_GEMMA_USER,), assistant=("{{content}}<end_of_turn>\n",), system=("{{content}}\n\n",),
        observation=(_GEMMA_OBSERVATION,), prefix=(BOS,), stop_words=stop_words, system_in_user=True, **kw,
    )


_VICUNA = Template(
    user=("USER: {{content}} ASSISTANT:",),
    default_system=("A chat between a curious user and an artificial intelligence assistant. "
                    "The assistant gives helpful, detailed, and polite answers to the user's questions."),
)

TEMPLATES: dict[str, Template] = {
    # --- Plain-text formats (base models)
    "empty": Template(assistant=("{{content}}",)),
    "default": Template(
        user=("Human: {{content}}", EOS, "\nAssistant:"), assistant=("{{content}}", EOS, "\n"),
        system=("System: {{content}}", EOS, "\n"),
    ),
    "alpaca": Template(
        user=("### Instruction:\n{{content}}\n\n### Response:\n",), assistant=("{{content}}", EOS, "\n\n"),
        default_system="Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n",
    ),
    "vicuna": _VICUNA,
    # LLaVA-1.5: vicuna's text; images expanded by the llava encoding in ftui.runner.vision
    "llava": _VICUNA,
    # --- ChatML family
    "chatml": Template(
        user=(_CHATML_USER,), assistant=(_CHATML_ASSISTANT,), system=(_CHATML_SYSTEM,),
        observation=("<|im_start|>tool\n{{content}}<|im_end|>\n<|im_start|>assistant\n",),
        stop_words=("<|im_end|>", "<|im_start|>"), replace_eos=True,
    ),
    "qwen": _qwen("You are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
    "qwen3": _qwen(reasoning=True),
    "qwen3_nothink": _qwen(),
    "qwen3_5": _qwen(reasoning=True, tool_format="qwen3_5"),
    "qwen3_5_nothink": _qwen(tool_format="qwen3_5"),
    # Qwen's vision-language models: the text is Qwen's; images are expanded by the qwen2_vl /
    # qwen3_vl encoding in ftui.runner.vision (LLaMA-Factory's mm_plugin of that name).
    "qwen2_vl": _qwen("You are a helpful assistant."),
    "qwen3_vl": _qwen(reasoning=True),
    "qwen3_vl_nothink": _qwen(),
    # Qwen2-Audio (LLaMA-Factory's qwen2_audio: ChatML, no tools); audios are expanded by ftui.runner.audio
    "qwen2_audio": Template(user=(_CHATML_USER,), assistant=(_CHATML_ASSISTANT,), system=(_CHATML_SYSTEM,),
                            default_system="You are a helpful assistant.", stop_words=("<|im_end|>",), replace_eos=True),
    "yi": Template(user=(_CHATML_USER,), assistant=(_CHATML_ASSISTANT,), system=(_CHATML_SYSTEM,), stop_words=("<|im_end|>",)),
    "intern2": Template(
        user=(_CHATML_USER,), assistant=(_CHATML_ASSISTANT,), system=(_CHATML_SYSTEM,), prefix=(BOS,),
        default_system=(
            "You are an AI assistant whose name is InternLM (书生·浦语).\n"
            "- InternLM (书生·浦语) is a conversational language model that is developed by Shanghai AI Laboratory "
            "(上海人工智能实验室). It is designed to be helpful, honest, and harmless.\n"
            "- InternLM (书生·浦语) can understand and communicate fluently in the language "
            "chosen by the user such as English and 中文."
        ),
        stop_words=("<|im_end|>",),
    ),
    # InternVL 3: intern2's text with its own system prompt; images expanded by the intern_vl encoding
    "intern_vl": Template(
        user=(_CHATML_USER,), assistant=(_CHATML_ASSISTANT,), system=(_CHATML_SYSTEM,), prefix=(BOS,),
        default_system="你是书生·万象，英文名是InternVL，是由上海人工智能实验室、清华大学及多家合作单位联合开发的多模态大语言模型。",
        stop_words=("<|im_end|>",),
    ),
    "phi4": Template(
        user=("<|im_start|>user<|im_sep|>{{content}}<|im_end|><|im_start|>assistant<|im_sep|>",),
        assistant=("{{content}}<|im_end|>",), system=("<|im_start|>system<|im_sep|>{{content}}<|im_end|>",),
        stop_words=("<|im_end|>",), replace_eos=True,
    ),
    # --- Llama
    "llama2": Template(user=(BOS, "[INST] {{content}} [/INST]"), system=("<<SYS>>\n{{content}}\n<</SYS>>\n\n",), system_in_user=True),
    "llama3": Template(
        user=(_LLAMA3_USER,), assistant=("{{content}}<|eot_id|>",),
        system=("<|start_header_id|>system<|end_header_id|>\n\n{{content}}<|eot_id|>",),
        function=("{{content}}<|eot_id|>",),
        observation=("<|start_header_id|>ipython<|end_header_id|>\n\n{{content}}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",),
        prefix=(BOS,), stop_words=("<|eot_id|>", "<|eom_id|>"), replace_eos=True, tool_format="llama3",
    ),
    "llama4": Template(
        user=(_LLAMA4_USER,), assistant=("{{content}}<|eot|>",),
        system=("<|header_start|>system<|header_end|>\n\n{{content}}<|eot|>",), function=("{{content}}<|eot|>",),
        observation=("<|header_start|>ipython<|header_end|>\n\n{{content}}<|eot|><|header_start|>assistant<|header_end|>\n\n",),
        prefix=(BOS,), stop_words=("<|eot|>", "<|eom|>"), replace_eos=True, tool_format="llama3",
    ),
    # --- Mistral
    "mistral": Template(
        user=("[INST] {{content}}[/INST]",), assistant=(" {{content}}", EOS), system=("{{content}}\n\n",),
        function=("[TOOL_CALLS] {{content}}", EOS),
        observation=('[TOOL_RESULTS] {"content": {{content}}}[/TOOL_RESULTS]',),
        prefix=(BOS,), tool_format="mistral", system_in_user=True,
    ),
    "ministral": Template(
        user=("[INST]{{content}}[/INST]",), system=("{{content}}\n\n",), function=("[TOOL_CALLS]{{content}}", EOS),
        observation=('[TOOL_RESULTS]{"content": {{content}}}[/TOOL_RESULTS]',),
        prefix=(BOS,), tool_format="mistral", system_in_user=True,
    ),
    "mistral_small": Template(
        user=("[INST]{{content}}[/INST]",), system=("[SYSTEM_PROMPT]{{content}}[/SYSTEM_PROMPT]",),
        function=("[TOOL_CALLS]{{content}}", EOS), observation=('[TOOL_RESULTS]{"content": {{content}}}[/TOOL_RESULTS]',),
        prefix=(BOS,), tool_format="mistral",
    ),
    "zephyr": Template(
        user=("<|user|>\n{{content}}", EOS, "<|assistant|>\n"), system=("<|system|>\n{{content}}", EOS),
        default_system="You are Zephyr, a helpful assistant.",
    ),
    # --- Gemma (the system text goes inside the first user turn)
    "gemma": _gemma(("<end_of_turn>",), replace_eos=True),
    "gemma2": _gemma(("<eos>", "<end_of_turn>"), efficient_eos=True),
    "gemma3": _gemma(("<end_of_turn>",), replace_eos=True),
    # --- Phi
    "phi": Template(
        user=("<|user|>\n{{content}}<|end|>\n<|assistant|>\n",), assistant=("{{content}}<|end|>\n",),
        system=("<|system|>\n{{content}}<|end|>\n",), stop_words=("<|end|>",), replace_eos=True,
    ),
    # --- DeepSeek
    "deepseek": Template(user=("User: {{content}}\n\nAssistant:",), system=("{{content}}\n\n",), prefix=(BOS,)),
    "deepseek3": Template(user=("<｜User｜>{{content}}<｜Assistant｜>",), prefix=(BOS,)),
    "deepseekr1": Template(user=("<｜User｜>{{content}}<｜Assistant｜>",), prefix=(BOS,), reasoning=True),
    # --- GLM
    "glm4": Template(
        user=("<|user|>\n{{content}}<|assistant|>",), assistant=("\n{{content}}",), system=("<|system|>\n{{content}}",),
        function=("{{content}}",), observation=("<|observation|>\n{{content}}<|assistant|>",),
        prefix=("[gMASK]<sop>",), stop_words=("<|user|>", "<|observation|>"), efficient_eos=True, tool_format="glm4",
    ),
    "chatglm3": Template(
        user=(Token("<|user|>"), "\n", "{{content}}", Token("<|assistant|>")), assistant=("\n", "{{content}}"),
        system=(Token("<|system|>"), "\n", "{{content}}"), function=("{{content}}",),
        observation=(Token("<|observation|>"), "\n", "{{content}}", Token("<|assistant|>")),
        prefix=(Token("[gMASK]"), Token("sop")), stop_words=("<|user|>", "<|observation|>"), efficient_eos=True,
        tool_format="glm4",
    ),
    # --- OpenAI gpt-oss (harmony): the analysis channel is its thinking block
    "gpt_oss": Template(
        user=("<|start|>user<|message|>{{content}}<|end|><|start|>assistant",), assistant=("{{content}}",),
        system=("<|start|>system<|message|>{{content}}<|end|>",),
        default_system="You are ChatGPT, a large language model trained by OpenAI.",
        thought_words=("<|channel|>analysis<|message|>", "<|end|><|start|>assistant<|channel|>final<|message|>"),
        efficient_eos=True, reasoning=True,
    ),
}

# LLaMA-Factory's templates for vision, video and audio models (those with an mm_plugin), less
# the ones ftui has as text templates: a YAML naming one is a multimodal run, refused as such
# rather than as an unknown template name.
MULTIMODAL_TEMPLATES = frozenset("""
    dots_ocr ernie_vl gemma3n gemma4 gemma4n glm4v glm4_5v glm_ocr granite3_vision intern_vl intern_s1 keye_vl kimi_vl
    lfm2_vl mllama moss_vl llava llava_next llava_next_llama3 llava_next_mistral llava_next_qwen llava_next_yi
    llava_next_video llava_next_video_mistral llava_next_video_yi mimo_vl minicpm_v minicpm_v_4_6 minicpm_o ministral3
    paligemma paligemma_chat pixtral qwen2_audio qwen2_omni qwen3_omni qwen3_omni_nothink qwen2_vl qwen3_vl
    qwen3_vl_nothink qwen3_6 video_llava yi_vl youtu_vl
""".split()) - set(TEMPLATES)
