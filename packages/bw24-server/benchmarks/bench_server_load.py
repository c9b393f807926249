"""Load benchmark of bw24-server (a benchmark, not a timed test).

    python packages/bw24-server/benchmarks/bench_server_load.py [--model smollm2-135m] [--backend cpu]
        [--clients 32] [--disconnect 4] [--max-tokens 16] [--url http://127.0.0.1:8000]

Starts a server (unless --url is given), runs every prompt once serially (greedy) for the reference
outputs, then N concurrent streaming clients plus a few that disconnect after their first event.
Checks: every client finishes without error, every greedy output equals its serial output, the
server's RSS after the burst stays within --rss-slack MiB of before. Reports requests/s and
p50/p95 time-to-first-token (queueing included: one engine serves the clients in turn).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import httpx

SUBJECTS = ["cats", "the sea", "Paris", "rain", "music", "bread", "winter", "trains"]


def prompts(n: int) -> list[str]:
    return [f"Write one sentence about {SUBJECTS[i % len(SUBJECTS)]} (#{i})." for i in range(n)]


async def one(c: httpx.AsyncClient, model: str, prompt: str, max_tokens: int, leave_early: bool = False) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True}
    t0 = time.perf_counter()
    ttft, text, done = None, [], False
    async with c.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread()).decode()}")
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError(ev["error"]["message"])
            delta = ev["choices"][0]["delta"].get("content")
            if delta:
                ttft = ttft if ttft is not None else time.perf_counter() - t0
                text.append(delta)
            if leave_early:
                return {"left": True}
    if not done:
        raise RuntimeError("stream ended without [DONE]")
    return {"text": "".join(text), "ttft": ttft, "total": time.perf_counter() - t0}


def rss_mib(pid: int) -> float:
    import psutil
    return psutil.Process(pid).memory_info().rss / 2**20


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


async def run_load(url: str, headers: dict, model: str, clients: int, disconnect: int, max_tokens: int) -> dict:
    ps = prompts(clients)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as c:
        serial = [(await one(c, model, p, max_tokens))["text"] for p in ps]
        t0 = time.perf_counter()
        tasks = [one(c, model, p, max_tokens) for p in ps]
        tasks += [one(c, model, "Count from one to one thousand.", 200, leave_early=True) for _ in range(disconnect)]
        res = await asyncio.gather(*tasks, return_exceptions=True)
        wall = time.perf_counter() - t0
        health = (await c.get("/health")).status_code
    errors = [r for r in res if isinstance(r, BaseException)]
    done = [r for r in res[:clients] if isinstance(r, dict)]
    mismatches = [i for i, r in enumerate(res[:clients]) if isinstance(r, dict) and r["text"] != serial[i]]
    ttfts = [r["ttft"] for r in done if r["ttft"] is not None]
    return {"clients": clients, "disconnect": disconnect, "max_tokens": max_tokens, "errors": [repr(e) for e in errors],
            "mismatches": mismatches, "wall_s": wall, "req_per_s": clients / wall,
            "ttft_p50_s": pct(ttfts, 0.5), "ttft_p95_s": pct(ttfts, 0.95), "health_after": health}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--disconnect", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2, help="bursts; RSS is compared after the first and last")
    ap.add_argument("--rss-slack", type=float, default=64.0, help="MiB of RSS growth tolerated between bursts")
    ap.add_argument("--url", default=None, help="use a running server instead of starting one")
    a = ap.parse_args(argv)

    srv = None
    if a.url is None:
        from bw24.server.launch import start_server
        srv = start_server(a.model, "--backend", a.backend, "--log-level", "warning")
    url, headers = (srv.url, srv.headers()) if srv else (a.url, {})
    try:
        rss, reports = [], []
        for i in range(a.rounds):
            rep = asyncio.run(run_load(url, headers, a.model, a.clients, a.disconnect, a.max_tokens))
            if srv:
                rss.append(rss_mib(srv.proc.pid))
                rep["server_rss_mib"] = round(rss[-1], 1)
            reports.append(rep)
            print(f"round {i}: " + json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rep.items()}))
    finally:
        if srv:
            srv.stop()
    ok = all(not r["errors"] and not r["mismatches"] and r["health_after"] == 200 for r in reports)
    if len(rss) >= 2:
        growth = rss[-1] - rss[0]
        print(f"server RSS after round 0: {rss[0]:.1f} MiB, after round {len(rss) - 1}: {rss[-1]:.1f} MiB "
              f"(growth {growth:+.1f} MiB, slack {a.rss_slack})")
        ok = ok and growth <= a.rss_slack
    last = reports[-1]
    print(f"{a.clients} streaming clients + {a.disconnect} early disconnects, max_tokens={a.max_tokens}: "
          f"{last['req_per_s']:.2f} req/s, TTFT p50 {last['ttft_p50_s']:.2f} s, p95 {last['ttft_p95_s']:.2f} s "
          f"-> {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
