"""Concurrent streaming clients and early disconnects (a small version of benchmarks/bench_server_load.py)."""

from __future__ import annotations

import asyncio
import re
import time

import httpx

MODEL = "smollm2-135m"
PROMPTS = ["The capital of France is", "One, two, three,", "def add(a, b):", "My favourite colour is"]


def counter(text: str, name: str) -> float:
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


async def stream_text(c: httpx.AsyncClient, prompt: str, max_tokens: int) -> str:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    out = []
    async with c.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(httpx.Response(200, content=line[6:]).json()["choices"][0]["text"])
    return "".join(out)


async def disconnect_early(c: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "prompt": "Count to a thousand: 1, 2,", "max_tokens": 400, "temperature": 0,
            "stream": True}
    async with c.stream("POST", "/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                break   # leave after the first event: the server must cancel the generation


async def give_up_non_streaming(c: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "prompt": "Count to a thousand: 1, 2,", "max_tokens": 400, "temperature": 0}
    try:
        await asyncio.wait_for(c.post("/v1/completions", json=body), timeout=1.0)
    except asyncio.TimeoutError:
        return   # the connection is dropped: the server must cancel the queued or running job
    raise AssertionError("a 400-token completion finished within a second")


def test_concurrent_streams_equal_serial_and_disconnect_frees_engine(server, http, engine):
    serial = {p: "".join(ev.text for ev in engine.generate(engine.tokenizer.encode(p), max_tokens=4,
                                                             temperature=0.0)) for p in PROMPTS}
    before = http.get("/metrics").text

    async def main():
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers(), timeout=120) as c:
            jobs = [disconnect_early(c), give_up_non_streaming(c)] + [stream_text(c, p, 4) for p in PROMPTS]
            return await asyncio.gather(*jobs)

    got = asyncio.run(main())[2:]
    assert dict(zip(PROMPTS, got, strict=True)) == serial
    # A job whose client left is dropped when the worker reaches it (queued) or at its next token.
    want = counter(before, "bw24_cancelled_generations_total") + 2
    for _ in range(100):
        after = http.get("/metrics").text
        if counter(after, "bw24_cancelled_generations_total") >= want:
            break
        time.sleep(0.1)
    assert counter(after, "bw24_cancelled_generations_total") == want
    generated = counter(after, "bw24_generated_tokens_total") - counter(before, "bw24_generated_tokens_total")
    assert generated < 4 * len(PROMPTS) + 50, "a disconnected client's generation kept running"
    assert http.get("/health").status_code == 200
