"""bw24-server --ngram: greedy output identical to plain decode (the exactness contract), speculation
only for a lone request (metrics and the `+spec-<drafter>` system_fingerprint suffix say which path
served it), drafter options refused at startup with exit 2, and a canary: a server whose verify
rubber-stamps the drafts must fail the same exactness check."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
from bw24.server.app import ServerConfig, create_app
from bw24.server.launch import start_server

MODEL = "smollm2-135m"
# Code editing repeats the prompt's tokens: the n-gram drafter proposes, and some drafts are wrong.
PROMPT = ("Rewrite this Python function to use a list comprehension and keep its name:\n\n"
          "def squares(xs):\n    out = []\n    for x in xs:\n        out.append(x * x)\n    return out\n\n"
          "def squares(xs):\n")
N = 24


def metric(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def body(max_tokens: int = N, **kw) -> dict:
    return {"model": MODEL, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, **kw}


def exact(got: str, plain: str) -> bool:
    """The exactness check: the served greedy text is plain decode's, character for character."""
    return got == plain


@pytest.fixture(scope="module")
def plain(engine) -> str:
    ids = engine.tokenizer.encode(PROMPT)
    return "".join(ev.text for ev in engine.generate(ids, max_tokens=N, temperature=0.0))


@pytest.fixture(scope="module")
def spec_server():
    srv = start_server(MODEL, "--backend", "cpu", "--ctx", "512", "--log-level", "warning", "--ngram", "--k", "4")
    yield srv
    srv.stop()


def test_spec_server_lone_request_is_speculative_and_exact(spec_server, plain):
    with httpx.Client(base_url=spec_server.url, timeout=120) as c:
        before = c.get("/metrics").text
        r = c.post("/v1/completions", json=body())
        after = c.get("/metrics").text
    assert r.status_code == 200, r.text
    j = r.json()
    assert exact(j["choices"][0]["text"], plain), (j["choices"][0]["text"], plain)
    assert j["system_fingerprint"] == "bw24-cpu+spec-ngram"
    assert j["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # the runner prefills from scratch
    d = {n: metric(after, n) - metric(before, n) for n in ("bw24_speculative_requests_total",
                                                           "bw24_speculative_drafted_tokens_total",
                                                           "bw24_speculative_accepted_tokens_total")}
    assert d["bw24_speculative_requests_total"] == 1
    assert d["bw24_speculative_drafted_tokens_total"] > 0, after
    assert 0 < d["bw24_speculative_accepted_tokens_total"] <= d["bw24_speculative_drafted_tokens_total"]


async def _stream(c: httpx.AsyncClient, payload: dict, started: asyncio.Event | None = None) -> tuple[str, set]:
    text, fps = [], set()
    async with c.stream("POST", "/v1/completions", json={**payload, "stream": True}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = httpx.Response(200, content=line[6:]).json()
                fps.add(chunk["system_fingerprint"])
                text.append(chunk["choices"][0]["text"])
                if started is not None:
                    started.set()
    return "".join(text), fps


def test_spec_server_concurrent_requests_are_plain(spec_server, plain):
    """A logprobs stream (never speculative) keeps the engine busy while two requests arrive: both
    were submitted while another request was active, so both are served by plain decode."""
    async def main():
        async with httpx.AsyncClient(base_url=spec_server.url, timeout=120) as c:
            started = asyncio.Event()
            blocker = asyncio.ensure_future(_stream(c, body(64, prompt="Count to a thousand: 1, 2,", logprobs=1),
                                                    started))
            await started.wait()
            two = await asyncio.gather(_stream(c, body()), _stream(c, body()))
            await blocker
            return blocker.result(), two

    with httpx.Client(base_url=spec_server.url, timeout=120) as c:
        before = c.get("/metrics").text
        (_, fp_blocker), two = asyncio.run(main())
        after = c.get("/metrics").text
    for text, fps in two:
        assert exact(text, plain)
        assert fps == {"bw24-cpu"}
    assert fp_blocker == {"bw24-cpu"}
    assert metric(after, "bw24_speculative_requests_total") == metric(before, "bw24_speculative_requests_total")
    skipped = 'bw24_speculative_skipped_requests_total'
    assert metric(after, skipped, '{reason="concurrent"}') - metric(before, skipped, '{reason="concurrent"}') == 2
    assert metric(after, skipped, '{reason="logprobs"}') - metric(before, skipped, '{reason="logprobs"}') == 1


@pytest.mark.parametrize("case", ["missing", "vocab", "mtp"])
def test_spec_server_bad_drafter_exits_2_before_binding(case, tmp_path):
    from bw24.server.launch import free_port

    if case == "missing":
        args, want = ["--draft", str(tmp_path / "nope.gguf")], "nope.gguf"
    elif case == "vocab":
        from bw24.gguf.synth import synth
        synth("qwen3-tiny", tmp_path / "tiny.gguf", mix="q8_0", seed=1)
        args, want = ["--draft", str(tmp_path / "tiny.gguf")], "must share the tokenizer"
    else:
        args, want = ["--mtp"], "no NextN/MTP head"
    port = free_port()
    p = subprocess.run([sys.executable, "-m", "bw24.server.cli", "--model", MODEL, "--backend", "cpu",
                        "--port", str(port), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "bw24-server: bad drafter option:" in p.stderr and want in p.stderr, p.stderr
    assert "Uvicorn running" not in p.stderr  # refused before the port was bound


def test_spec_server_canary_broken_verify_fails_exactness(engine, serve_in_thread, plain, monkeypatch):
    """The same request and check against a server whose verify accepts every draft must not pass."""
    from bw24.engine.spec import DrafterOptions
    from bw24.engine.spec import verify as spec_verify

    real = spec_verify.Verifier.forward

    def rubber_stamp(self, ids):
        v = real(self, ids)
        for i in range(len(ids) - 1):
            v.logits[i, ids[i + 1]] = np.float32(1e30)
        return v

    monkeypatch.setattr(spec_verify.Verifier, "forward", rubber_stamp)
    app = create_app(ServerConfig(model=MODEL, backend="cpu", drafter=DrafterOptions(ngram=True), k=4),
                     loader=lambda: engine)
    with serve_in_thread(app) as url:
        for _ in range(400):
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        r = httpx.post(url + "/v1/completions", json=body(), timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["system_fingerprint"] == "bw24-cpu+spec-ngram"
        assert not exact(r.json()["choices"][0]["text"], plain)
