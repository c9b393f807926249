"""Chat templates for GGUFs that ship none (gemma-3-270m's GGUF has no tokenizer.chat_template).

gemma3: the model's own turn format (HF gemma-3 template: a system message is prepended to the first
user turn); anything else: ChatML, llama.cpp's default when a model has no template.
"""

from __future__ import annotations

from typing import Any

GEMMA = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set prefix = messages[0]['content'] + '\\n\\n' -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for m in loop_messages -%}"
    "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ (prefix if loop.first else '') + m['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
FALLBACKS = {"gemma3": GEMMA}


def fallback_template(arch: str, tok: Any):
    """A ChatTemplate for a tokenizer whose GGUF has no template."""
    from bw24.tokenizer import ChatTemplate

    bos = tok.vocab.tokens[tok.bos_id] if tok.bos_id is not None else ""
    eos = tok.vocab.tokens[tok.eos_id] if tok.eos_id is not None else ""
    return ChatTemplate(FALLBACKS.get(arch, CHATML), bos_token=bos, eos_token=eos)
