"""Chat templates: exact rendered text for the two models that carry one; clear errors otherwise.

The expected strings were written by hand from the templates in the GGUFs (HF conventions:
trim_blocks, lstrip_blocks, {%- -%} whitespace control), not produced by the renderer.
"""

from __future__ import annotations

import pytest
from bw24.tokenizer import ChatTemplate, ChatTemplateError

CONV = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "What is 2+2?"}]
SYS = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]
QWEN_DEFAULT_SYS = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def test_smollm2_default_system(load_tok):
    got = load_tok("smollm2-135m").apply_chat_template(CONV)
    assert got == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_smollm2_own_system_no_generation_prompt(load_tok):
    got = load_tok("smollm2-135m").apply_chat_template(SYS, add_generation_prompt=False)
    assert got == "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"


def test_qwen_default_system(load_tok):
    got = load_tok("qwen2.5-coder-0.5b").apply_chat_template(CONV)
    assert got == (
        QWEN_DEFAULT_SYS
        + "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen_own_system(load_tok):
    got = load_tok("qwen2.5-coder-0.5b").apply_chat_template(SYS, add_generation_prompt=False)
    assert got == "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"


def test_qwen_tools_and_tool_calls(load_tok):
    msgs = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
    ]
    got = load_tok("qwen2.5-coder-0.5b").apply_chat_template(msgs, tools=[WEATHER])
    tool_json = ('{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", '
                 '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}')
    assert got == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n"
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + tool_json
        + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_rendered_prompt_tokenizes_with_special_tokens(load_tok):
    tok = load_tok("qwen2.5-coder-0.5b")
    ids = tok.encode(tok.apply_chat_template(SYS), parse_special=True)
    assert ids[0] == tok.token_to_id("<|im_start|>")
    assert ids.count(tok.token_to_id("<|im_end|>")) == 2


def test_model_without_template_is_a_clear_error(load_tok):
    tok = load_tok("gemma3-270m")
    assert tok.chat_template is None
    with pytest.raises(ChatTemplateError, match="no tokenizer.chat_template"):
        tok.apply_chat_template(CONV)


def test_bos_eos_raise_exception_strftime():
    t = ChatTemplate("{{ bos_token }}{% if messages|length > 1 %}{{ raise_exception('one message only') }}"
                     "{% endif %}{{ messages[0]['content'] }}{{ eos_token }}|{{ strftime_now('%Y') | length }}",
                     bos_token="<s>", eos_token="</s>")
    assert t.render([{"role": "user", "content": "x"}]) == "<s>x</s>|4"
    with pytest.raises(ChatTemplateError, match="one message only"):
        t.render(CONV)


def test_tojson_keeps_unicode_and_order():
    t = ChatTemplate("{{ messages[0] | tojson }}")
    assert t.render([{"role": "user", "content": "caf\u00e9 <b>"}]) == '{"role": "user", "content": "caf\u00e9 <b>"}'


def test_sandbox_blocks_unsafe_access():
    t = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ChatTemplateError):
        t.render(CONV)
    t2 = ChatTemplate("{% set _ = messages.append({'role': 'x'}) %}ok")
    with pytest.raises(ChatTemplateError):
        t2.render(CONV)


def test_bad_templates_and_messages():
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplate("{% for m in messages %}")
    with pytest.raises(ChatTemplateError, match="empty"):
        ChatTemplate("  ")
    t = ChatTemplate("{{ messages[0]['content'] }}")
    with pytest.raises(ChatTemplateError, match="list of dicts"):
        t.render("hello")
    with pytest.raises(ChatTemplateError, match="'role'"):
        t.render([{"content": "no role"}])
