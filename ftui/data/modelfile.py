"""An Ollama ``Modelfile`` for an exported model: its TEMPLATE written from the run's chat
template (ftui.presets.templates), its stop parameters the template's stop tokens.

LLaMA-Factory's Export tab writes one the same way (its ``get_ollama_modelfile``): the
template's slots as Go template text, ``{{ .Content }}`` where a turn's text goes, the
tokenizer's BOS / EOS text where a slot has them; this one also keeps tool answers (Ollama's
"tool" role) and LLaMA-2-style templates' system text inside the first user turn, and sizes
``num_ctx`` to what the model's positions allow. Torch-free (no tokenizer here: the caller
passes the BOS / EOS text and the stop tokens).
"""

from __future__ import annotations

from ftui.presets.templates import Slot, Special, Template, Token

NUM_CTX = 4096  # LLaMA-Factory's value; lowered to the model's max_position_embeddings


def _go_text(text: str) -> str:
    """Literal text in a Go template: a ``{{`` would open an action, so it is written as one."""
    return text.replace("{{", '{{ "{{" }}')


def slot_to_go(slot: Slot, bos: str | None, eos: str | None, content: str = "{{ .Content }}") -> str:
    """A slot as Go template text, ``content`` (Go template text) where the turn's text goes."""
    parts = []
    for piece in slot:
        if isinstance(piece, Special):
            text = bos if piece.which == "bos" else eos
            if text:
                parts.append(_go_text(text))
        elif isinstance(piece, Token):
            parts.append(_go_text(piece.text))
        else:
            head, sep, tail = piece.partition("{{content}}")
            parts.append(_go_text(head.replace("{{idx}}", "")))
            if sep:
                parts.append(content)
                parts.append(_go_text(tail))
    return "".join(parts)


def ollama_template(template: Template, bos: str | None, eos: str | None) -> str:
    """The Go template Ollama renders a conversation with: the prefix, the system prompt (in
    its slot, or inside the first user turn), then each user / assistant / tool turn; the
    user slot ends with the assistant's header, so the model answers after the last one."""
    t = template
    out = slot_to_go(t.prefix, bos, eos)
    user = slot_to_go(t.user, bos, eos)
    if t.system_in_user:  # the system text opens the first user turn's text
        out += "{{ $first := true }}"
        user = slot_to_go(t.user, bos, eos, "{{ if $first }}{{ $first = false }}{{ if $.System }}"
                          + slot_to_go(t.system, bos, eos, "{{ $.System }}") + "{{ end }}{{ end }}{{ .Content }}")
    else:
        out += "{{ if .System }}" + slot_to_go(t.system, bos, eos, "{{ .System }}") + "{{ end }}"
    out += ('{{ range .Messages }}{{ if eq .Role "user" }}' + user
            + '{{ else if eq .Role "assistant" }}' + slot_to_go(t.assistant or (), bos, eos)
            + '{{ else if eq .Role "tool" }}' + slot_to_go(t.observation or (), bos, eos) + "{{ end }}{{ end }}")
    return out


def _quoted(text: str) -> str:
    """A Modelfile string: triple quotes hold anything but a triple quote."""
    if '"""' in text:
        raise ValueError('a chat template with """ in it cannot be written in a Modelfile')
    return '"""' + text + '"""'


def modelfile(template: Template | None, bos: str | None, eos: str | None, stop_tokens: list[str],
              max_positions: int | None, source: str = ".", default_system: str | None = None) -> str:
    """The Modelfile's text. ``template`` None (the run used its tokenizer's own Jinja chat
    template): no TEMPLATE line, Ollama takes the one in the GGUF's metadata or its own guess
    (said in a comment). ``source``: what FROM loads (the GGUF file when there is one: Ollama
    imports safetensors only for some architectures)."""
    lines = ["# Ollama Modelfile written by ftui export: ollama create NAME -f Modelfile", "", f"FROM {source}", ""]
    if template is not None:
        lines += [f"TEMPLATE {_quoted(ollama_template(template, bos, eos))}", ""]
        system = template.default_system if default_system is None else default_system
        if system:
            lines += [f"SYSTEM {_quoted(system)}", ""]
    else:
        lines += ["# The run used its tokenizer's own chat template (tokenizer_config.json / the GGUF's",
                  "# tokenizer.chat_template); Ollama reads it from the GGUF or picks a known one.", ""]
    for token in dict.fromkeys(stop_tokens):  # once each, in order
        if token:
            lines.append("PARAMETER stop " + (_quoted(token) if '"' in token else f'"{token}"'))
    ctx = NUM_CTX if not max_positions else min(NUM_CTX, int(max_positions))
    lines.append(f"PARAMETER num_ctx {ctx}")
    return "\n".join(lines) + "\n"
