"""Named built-in chat templates (Jinja, as transformers' ``apply_chat_template`` takes them).

Used when the RunConfig names a ``template`` (LLaMA-Factory's key) instead of relying on the
tokenizer's own. Names follow LLaMA-Factory where one exists. ``tools`` (sharegpt's tool
column) is rendered into the system turn; ``tool`` turns are the observations of a call.
"""

from __future__ import annotations

_SYSTEM_WITH_TOOLS = (
    "{% set sys = namespace(text='') %}"
    "{% if messages and messages[0]['role'] == 'system' %}{% set sys.text = messages[0]['content'] %}{% endif %}"
    "{% if tools %}{% set sys.text = sys.text + '\\n\\nTools:\\n' + (tools | tojson) %}{% endif %}"
)

CHATML = (
    _SYSTEM_WITH_TOOLS
    + "{% if sys.text %}{{ '<|im_start|>system\\n' + sys.text + '<|im_end|>\\n' }}{% endif %}"
    "{% for m in messages if m['role'] != 'system' %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

LLAMA3 = (
    _SYSTEM_WITH_TOOLS
    + "{{ bos_token }}"
    "{% if sys.text %}{{ '<|start_header_id|>system<|end_header_id|>\\n\\n' + sys.text + '<|eot_id|>' }}{% endif %}"
    "{% for m in messages if m['role'] != 'system' %}"
    "{% set role = 'ipython' if m['role'] == 'tool' else m['role'] %}"
    "{{ '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' + m['content'] + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

MISTRAL = (
    _SYSTEM_WITH_TOOLS
    + "{{ bos_token }}"
    "{% for m in messages if m['role'] != 'system' %}"
    "{% if m['role'] == 'assistant' %}{{ m['content'] + eos_token }}"
    "{% else %}{{ '[INST] ' + ((sys.text + '\\n\\n') if loop.first and sys.text else '') + m['content'] + ' [/INST]' }}"
    "{% endif %}{% endfor %}"
)

GEMMA = (
    _SYSTEM_WITH_TOOLS
    + "{{ bos_token }}"
    "{% for m in messages if m['role'] != 'system' %}"
    "{% set role = 'model' if m['role'] == 'assistant' else 'user' %}"
    "{{ '<start_of_turn>' + role + '\\n' + ((sys.text + '\\n\\n') if loop.first and sys.text else '') + m['content'] + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

PHI = (
    _SYSTEM_WITH_TOOLS
    + "{% if sys.text %}{{ '<|system|>\\n' + sys.text + '<|end|>\\n' }}{% endif %}"
    "{% for m in messages if m['role'] != 'system' %}"
    "{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

# Plain-text turns for base models that have no chat format of their own.
DEFAULT = (
    _SYSTEM_WITH_TOOLS
    + "{% if sys.text %}{{ 'System: ' + sys.text + '\\n' }}{% endif %}"
    "{% for m in messages if m['role'] != 'system' %}"
    "{% if m['role'] == 'assistant' %}{{ 'Assistant: ' + m['content'] + eos_token + '\\n' }}"
    "{% else %}{{ m['role'] | capitalize + ': ' + m['content'] + '\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}"
)

TEMPLATES: dict[str, str] = {
    "chatml": CHATML,
    "qwen": CHATML,
    "llama3": LLAMA3,
    "mistral": MISTRAL,
    "gemma": GEMMA,
    "phi": PHI,
    "default": DEFAULT,
}
