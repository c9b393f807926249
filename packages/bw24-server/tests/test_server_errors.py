"""Every bad-input case: status code and the OpenAI error body naming the field."""

from __future__ import annotations

import httpx
import openai
import pytest

MODEL = "smollm2-135m"
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]


def check_error(r: httpx.Response, status: int, param: str | None, code: str | None = None) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert err["param"] == param
    if code is not None:
        assert err["code"] == code
    if param is not None:
        assert param.split("[")[0].split(".")[0] in err["message"]
    return err


@pytest.mark.parametrize("path,body,param", [
    (CHAT, {"model": MODEL}, "messages"),
    (CHAT, {"messages": MSG}, "model"),
    (COMP, {"model": MODEL}, "prompt"),
])
def test_missing_field(http, path, body, param):
    check_error(http.post(path, json=body), 400, param, "missing_field")


@pytest.mark.parametrize("field,value", [
    ("max_tokens", 0), ("max_tokens", -5), ("max_tokens", "ten"), ("max_completion_tokens", 0),
    ("temperature", 2.5), ("temperature", -0.1), ("top_p", 1.5), ("top_p", 0), ("top_k", -1),
    ("min_p", 1.5), ("seed", -1), ("presence_penalty", 3), ("frequency_penalty", -3),
    ("stream", "yes"), ("stop", 7), ("stop", ""), ("top_logprobs", 21), ("messages", []),
])
def test_out_of_range_or_wrong_type(http, field, value):
    body = {"model": MODEL, "messages": MSG, field: value}
    check_error(http.post(CHAT, json=body), 400, field)


def test_wrong_message_shapes(http):
    bad_role = {"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}
    check_error(http.post(CHAT, json=bad_role), 400, "messages[0].role")
    bad_content = {"model": MODEL, "messages": [{"role": "user", "content": 5}]}
    check_error(http.post(CHAT, json=bad_content), 400, "messages[0].content")
    image = {"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}
    check_error(http.post(CHAT, json=image), 400, "messages[0].content[0].image_url", "unsupported_field")


@pytest.mark.parametrize("field,value", [("tools", []), ("logit_bias", {"1": 2}), ("response_format", {"type": "json_object"})])
def test_unsupported_field_is_named(http, field, value):
    err = check_error(http.post(CHAT, json={"model": MODEL, "messages": MSG, field: value}), 400, field,
                      "unsupported_field")
    assert f"'{field}'" in err["message"]


@pytest.mark.parametrize("field,value", [("echo", True), ("suffix", "x"), ("best_of", 2)])
def test_unsupported_completion_field(http, field, value):
    check_error(http.post(COMP, json={"model": MODEL, "prompt": "hi", field: value}), 400, field, "unsupported_field")


def test_malformed_json(http):
    r = http.post(CHAT, content=b'{"model": "x", "messages": [', headers={"content-type": "application/json"})
    check_error(r, 400, None, "invalid_json")
    r = http.post(CHAT, content=b"[1, 2]", headers={"content-type": "application/json"})
    check_error(r, 400, None)


def test_n_greater_than_one(http):
    check_error(http.post(CHAT, json={"model": MODEL, "messages": MSG, "n": 2}), 400, "n", "unsupported_value")


def test_top_logprobs_needs_logprobs(http):
    check_error(http.post(CHAT, json={"model": MODEL, "messages": MSG, "top_logprobs": 2}), 400, "top_logprobs")


def test_prompt_longer_than_context(http):
    n_ctx = http.post("/tokenize", json={"content": "x"}).json()["max_model_len"]
    check_error(http.post(COMP, json={"model": MODEL, "prompt": [1] * n_ctx}), 400, "prompt", "context_length_exceeded")
    long_msg = [{"role": "user", "content": "word " * n_ctx}]
    check_error(http.post(CHAT, json={"model": MODEL, "messages": long_msg}), 400, "messages", "context_length_exceeded")
    r = http.post(COMP, json={"model": MODEL, "prompt": [1] * 10, "max_tokens": n_ctx})
    check_error(r, 400, "max_tokens", "context_length_exceeded")


def test_token_ids_out_of_vocab(http):
    check_error(http.post(COMP, json={"model": MODEL, "prompt": [1, 10**7]}), 400, "prompt")
    check_error(http.post(COMP, json={"model": MODEL, "prompt": [1, -3]}), 400, "prompt[1]")
    check_error(http.post("/detokenize", json={"tokens": [10**7]}), 400, "tokens")


def test_unknown_model_is_404(http):
    for path, body in ((CHAT, {"model": "gpt-4o", "messages": MSG}), (COMP, {"model": "gpt-4o", "prompt": "x"})):
        err = check_error(http.post(path, json=body), 404, "model", "model_not_found")
        assert "gpt-4o" in err["message"]


def test_unknown_route_and_method(http):
    check_error(http.get("/v1/nothing"), 404, None, "not_found")
    check_error(http.get(CHAT), 405, None, "method_not_allowed")


def test_api_key_required(server):
    body = {"model": MODEL, "messages": MSG, "max_tokens": 1}
    check_error(httpx.post(server.url + CHAT, json=body), 401, None, "invalid_api_key")
    check_error(httpx.post(server.url + CHAT, json=body, headers={"Authorization": "Bearer nope"}), 401, None,
                "invalid_api_key")
    check_error(httpx.get(server.url + "/v1/models", headers={"Authorization": "Basic abc"}), 401, None)
    assert httpx.get(server.url + "/health").status_code == 200    # health and metrics stay open
    assert httpx.get(server.url + "/metrics").status_code == 200


def test_openai_client_raises_typed_errors(server, client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope", messages=MSG)
    assert e.value.status_code == 404 and e.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=0)
    assert e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=MSG, n=3)
    assert e.value.body["param"] == "n"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.v1, api_key="wrong", max_retries=0).models.list()
