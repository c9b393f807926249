"""/health (503 while loading, 200 ready), /metrics, /tokenize, /detokenize, /openapi.json."""

from __future__ import annotations

import re
import threading
import time

import httpx
import pytest
from bw24.server.app import ServerConfig, create_app

MODEL = "smollm2-135m"


def metric(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    assert m, f"{name}{labels} not in /metrics"
    return float(m.group(1))


def test_health_is_503_until_the_model_is_loaded(engine, serve_in_thread):
    # The real engine behind a loader that waits for a signal: the loading phase is observable.
    gate = threading.Event()

    def loader():
        gate.wait(30)
        return engine

    app = create_app(ServerConfig(model=MODEL, backend="cpu"), loader=loader)
    try:
        with serve_in_thread(app) as url:
            for _ in range(200):
                try:
                    r = httpx.get(url + "/health")
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            assert r.status_code == 503 and r.json()["error"]["code"] == "model_loading"
            r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "a", "max_tokens": 1})
            assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"
            gate.set()
            for _ in range(100):
                if httpx.get(url + "/health").status_code == 200:
                    break
                time.sleep(0.05)
            assert httpx.get(url + "/health").json() == {"status": "ok", "model": MODEL, "backend": "cpu"}
            r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "a", "max_tokens": 1,
                                                          "temperature": 0})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 1
    finally:
        gate.set()


def test_session_server_reported_loading_then_ready(server):
    assert server.statuses[-1] == 200
    assert set(server.statuses) <= {200, 503}


def test_metrics_count_a_request(http):
    before = http.get("/metrics").text
    r = http.post("/v1/completions", json={"model": MODEL, "prompt": "Hello", "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200
    u = r.json()["usage"]
    after = http.get("/metrics")
    assert after.headers["content-type"].startswith("text/plain")
    a, b = after.text, before
    lab = '{endpoint="/v1/completions",status="200"}'
    prev = metric(b, "bw24_requests_total", lab) if lab in b else 0.0
    assert metric(a, "bw24_requests_total", lab) == prev + 1
    assert metric(a, "bw24_generated_tokens_total") - metric(b, "bw24_generated_tokens_total") == u["completion_tokens"]
    assert metric(a, "bw24_prompt_tokens_total") - metric(b, "bw24_prompt_tokens_total") == u["prompt_tokens"]
    assert metric(a, "bw24_time_to_first_token_seconds_count") == metric(b, "bw24_time_to_first_token_seconds_count") + 1
    assert metric(a, "bw24_time_per_output_token_seconds_count") - metric(b, "bw24_time_per_output_token_seconds_count") == 2
    assert metric(a, "bw24_decode_tokens_per_second") > 0
    assert metric(a, "bw24_queue_depth") == 0


def test_tokenize_detokenize_roundtrip(http, engine):
    text = "Hello, world! café"
    r = http.post("/tokenize", json={"content": text, "add_special": False}).json()
    assert r["tokens"] == engine.tokenizer.encode(text, add_special=False) and r["count"] == len(r["tokens"])
    assert http.post("/detokenize", json={"tokens": r["tokens"]}).json() == {"prompt": text}
    msgs = [{"role": "user", "content": "hi"}]
    assert http.post("/tokenize", json={"messages": msgs}).json()["tokens"] == engine.chat_ids(msgs)
    r = http.post("/tokenize", json={"content": "a", "messages": msgs})
    assert r.status_code == 400 and r.json()["error"]["param"] == "content"


def test_openapi_lists_every_endpoint(server):
    spec = httpx.get(server.url + "/openapi.json").json()
    for path in ("/v1/models", "/v1/chat/completions", "/v1/completions", "/health", "/metrics", "/tokenize",
                 "/detokenize"):
        assert path in spec["paths"], path
    chat = spec["components"]["schemas"]["ChatCompletionRequest"]
    assert chat["additionalProperties"] is False
    for f in ("messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
              "stop", "presence_penalty", "frequency_penalty", "stream", "stream_options", "logprobs",
              "top_logprobs", "n", "user"):
        assert f in chat["properties"], f


@pytest.mark.parametrize("argv,ok", [(["--model", "m"], True), (["--model", "m", "--backend", "tpu"], False),
                                     (["--model", "m", "--ctx", "0"], False), ([], False)])
def test_cli_arguments(argv, ok):
    from bw24.server.cli import parse_args
    if ok:
        a = parse_args(argv)
        assert (a.host, a.port, a.backend, a.ctx, a.alias) == ("127.0.0.1", 8000, "auto", None, None)
    else:
        with pytest.raises(SystemExit):
            parse_args(argv)
