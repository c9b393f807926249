"""Per-kernel time of one replayed decode step (and one prefill chunk), measured on the device.

python packages/bw24-engine/benchmarks/gpu_profile.py OUTDIR PRESET[:QUANT[:DEPTH]] ...

Kernel durations come from CUPTI through torch.profiler (it sees every kernel of the process,
CuPy's and graph-replayed ones included). Per kernel name: launches per token, device µs per
token, share of the step; the step's wall time per token next to the sum of kernel time shows
what launch gaps cost. Synthetic presets come from the perf cells' cache ($BW24_BENCH_CACHE).
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

STEPS = 32


def model_file(preset: str, quant: str) -> Path:
    """A real file as given, else the perf cells' cached synth file (the same path `bw24 bench` uses)."""
    if Path(preset).is_file():
        return Path(preset)
    from bw24.engine.perf.cells import Cell
    from bw24.engine.perf.models import cache_dir, model_path

    return model_path(Cell(preset, quant, "decode"), cache_dir(None))


def kernel_table(run_n, n_tokens: int) -> tuple[list[tuple[str, float, float]], float]:
    """[(kernel name, launches/token, µs/token)] sorted by time, and wall µs/token."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        run_n()
        wall = (time.perf_counter() - t0) * 1e6 / n_tokens
    agg: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA") and getattr(e, "device_time", 0) > 0:
            a = agg[e.name[:90]]
            a[0] += 1
            a[1] += e.device_time
    rows = sorted(((k, v[0] / n_tokens, v[1] / n_tokens) for k, v in agg.items()), key=lambda r: -r[2])
    return rows, wall


def verify_table(m, ops, rng, plain_us: float, T: int = 5) -> tuple[list[str], float]:
    """The speculative verify of T tokens at the same depth (spec.device.FastVerifier: forward(T) with
    every row's logits, row argmax, one host read), replayed STEPS times: its cost in decode steps."""
    from bw24.engine.spec.device import FastVerifier

    fv, n0 = FastVerifier(m), m.kv.n_past
    ops.copy_from_host(m.buf.view(T).ids, rng.integers(10, m.cfg.n_vocab - 10, size=T).astype(np.int32))

    def verify_n():
        for _ in range(STEPS):
            m.kv.reset(n0)
            fv.run(T)

    verify_n()  # eager, capture
    t0 = time.perf_counter()
    verify_n()
    us = (time.perf_counter() - t0) * 1e6 / STEPS
    rows, wall = kernel_table(verify_n, STEPS)
    m.kv.reset(n0)
    head = (f"## verify T={T}: {us:.1f} us unprofiled = {us / plain_us:.2f} decode steps; kernels "
            f"{sum(r[1] for r in rows):.0f}/verify, kernel time {sum(r[2] for r in rows):.1f} us")
    return [head] + [f"{r[2]:9.1f} us {r[1]:6.1f}x  {r[0]}" for r in rows[:30]], sum(r[1] for r in rows)


def spec_table(m, ops, rng, plain_us: float, decode_kernels: float, verify_kernels: float, n: int = 64,
               k: int = 4) -> list[str]:
    """Draft = target (a twin with its own KV cache; acceptance 1.0), greedy, K=k, n tokens on the fast
    path: where a round's time goes (issue 8's overhead target). Per round, decode only (SpecStats.decode_s
    excludes the target's prefill and the drafter's prompt ingestion; their kernels are profiled apart and
    taken out of the table): unprofiled wall, kernel time (the GPU busy), launches against the expected
    (draft steps x a decode step's + one verify's), and the GraphsByT rebuilds of the timed run (0 when
    every draft step and verify replays a kept graph)."""
    from bw24.engine.spec import DraftModelDrafter, SpecDecoder
    from bw24.engine.spec.draft_model import twin_model
    from bw24.engine.spec.runner import ingest

    d = DraftModelDrafter(twin_model(m))
    dec = SpecDecoder(m, d, k=k)
    prompt = rng.integers(10, m.cfg.n_vocab - 10, size=64).tolist()
    for _ in range(2):  # compile, size scratch, capture every graph
        list(dec.generate(prompt, n))
    graphs = lambda: (d._dev[1].rebuilds if d._dev else -1, dec.fast.graphs.rebuilds)  # noqa: E731
    before, steps0 = graphs(), d.steps
    ops.synchronize()
    list(dec.generate(prompt, n))
    ops.synchronize()
    st, steps, after = dec.stats, d.steps - steps0, graphs()
    rounds = max(st.rounds, 1)
    dec_us = st.decode_s * 1e6

    full, _ = kernel_table(lambda: list(dec.generate(prompt, n)), 1)
    pre, _ = kernel_table(lambda: ingest(m, d, prompt), 1)  # what generate does before its decode clock
    ops.synchronize()
    minus = {r[0]: r for r in pre}
    rows = sorted(((name, c - minus.get(name, (0, 0, 0))[1], t - minus.get(name, (0, 0, 0))[2]) for name, c, t in full),
                  key=lambda r: -r[2])
    rows = [r for r in rows if r[1] > 0.5]
    launches, ktime = sum(r[1] for r in rows), sum(r[2] for r in rows)
    head = (f"## spec self (draft = target) K={k}, {n} tokens: {st.n_generated} tokens in {st.rounds} rounds "
            f"(acceptance {st.accepted / max(st.drafted, 1):.2f}); decode wall {dec_us / 1e3:.1f} ms = "
            f"{dec_us / rounds:.0f} us/round = {dec_us / st.n_generated / plain_us:.2f} plain steps/token; "
            f"{steps / rounds:.2f} draft steps/round; prompt ingestion (prefill + drafter begin) "
            f"{st.prefill_s * 1e3:.1f} ms apart; decode kernel time {ktime / rounds:.0f} us/round "
            f"({100 * ktime / max(dec_us, 1e-9):.0f}% of the decode wall, profiled run); launches "
            f"{launches / rounds:.0f}/round vs expected {steps / rounds * decode_kernels + verify_kernels:.0f}; "
            f"GraphsByT rebuilds in the timed run: drafter {after[0] - before[0]}, verifier {after[1] - before[1]}")
    return [head] + [f"{r[2] / rounds:9.1f} us {r[1] / rounds:6.1f}x  {r[0]}" for r in rows[:20]]


def parse_spec(spec: str) -> tuple[str, str, int]:
    """PRESET[:QUANT[:DEPTH]] -> (preset, quant, depth); quant q4_k_m and depth 64 unless given."""
    parts = spec.split(":")
    if len(parts) > 3 or not parts[0]:
        raise SystemExit(f"{spec!r}: use PRESET[:QUANT[:DEPTH]]")
    quant = parts[1] if len(parts) > 1 and parts[1] else "q4_k_m"
    try:
        depth = int(parts[2]) if len(parts) > 2 else 64
    except ValueError:
        raise SystemExit(f"{spec!r}: DEPTH must be a whole number of tokens") from None
    if depth < 0:
        raise SystemExit(f"{spec!r}: DEPTH must be 0 or more")
    return parts[0], quant, depth


def profile_model(spec: str, out: Path, summary: list[str]) -> None:
    from bw24.engine import Engine
    from bw24.engine.graph import decode_step
    from bw24.engine.sampling import SamplingParams

    preset, quant, depth = parse_spec(spec)
    path = model_file(preset, quant)
    eng = Engine.load(path, backend="cuda", n_ctx=max(4096, depth + 256) + 256, progress=False)  # the chunk: BW24_UBATCH or 512
    m, ops = eng.model, eng.ops
    rng = np.random.default_rng(0)
    prompt = rng.integers(10, m.cfg.n_vocab - 10, size=max(depth, 1)).tolist()
    m.kv.reset()
    m.feed(prompt)
    params = SamplingParams()
    ops.sample(m.buf.logits[0], params, m.kv.pos, out=m.buf.view(1).ids)
    # keys: the depth classes (BW24_ATTN_DEPTH) as plain decode and the perf cells run them. Without them (the
    # profiles until e6bec2b) it timed one attention geometry at every depth, and with the tensor-core rows
    # (BW24_ATTN_DEC_MMA) both attention kernels a layer, where a deep step's graph launches one
    run = ops.capture(decode_step(m, params), keys=lambda: m.kv.n_past)
    for _ in range(4):
        m.kv.reserve(1)
        run()
    ops.synchronize()

    def decode_n():
        for _ in range(STEPS):
            m.kv.reserve(1)
            run()
        ops.synchronize()

    t0 = time.perf_counter()
    decode_n()
    plain_us = (time.perf_counter() - t0) * 1e6 / STEPS
    rows, wall = kernel_table(decode_n, STEPS)
    # a GGUF path's file name, not its folders (the eae1eee profile of the real pair failed writing
    # profile_/tmp/bw24cache/...: its tables printed, its files not written)
    name = f"{Path(str(preset)).name.removesuffix('.gguf')}-{quant}_d{depth}"
    lines = [f"## decode {name}: {plain_us:.1f} us/token unprofiled ({1e6 / plain_us:.0f} tok/s), "
             f"{wall:.1f} us/token under the profiler; kernels {sum(r[1] for r in rows):.0f}/token, "
             f"kernel time {sum(r[2] for r in rows):.1f} us/token"]
    lines += [f"{r[2]:9.1f} us {r[1]:6.1f}x  {r[0]}" for r in rows[:40]]
    vlines, vk = verify_table(m, ops, rng, plain_us)
    lines += vlines + spec_table(m, ops, rng, plain_us, sum(r[1] for r in rows), vk)
    m.kv.reset()
    m.feed(prompt)

    # one prefill chunk of 512 tokens
    T = 512
    ids = rng.integers(10, m.cfg.n_vocab - 10, size=T).tolist()

    def prefill():
        m.kv.reset()
        m.feed(ids)
        ops.synchronize()

    prefill()
    prefill()  # with prefill graphs (the default) the first chunk runs eagerly, the second captures
    t0 = time.perf_counter()
    prefill()
    pp_s = time.perf_counter() - t0
    prow, pwall = kernel_table(prefill, 1)
    lines.append(f"## prefill {name} pp{T}: {pp_s * 1e3:.1f} ms ({T / pp_s:.0f} tok/s); kernel time "
                 f"{sum(r[2] for r in prow) / 1e3:.1f} ms")
    lines += [f"{r[2]:9.1f} us {r[1]:6.0f}x  {r[0]}" for r in prow[:25]]
    text = "\n".join(lines)
    print(text, flush=True)
    (out / f"profile_{name}.txt").write_text(text + "\n")
    summary.append(f"{name}: decode {1e6 / plain_us:.0f} tok/s, kernel {sum(r[2] for r in rows):.0f} us/tok of "
                   f"{plain_us:.0f}; pp512 {T / pp_s:.0f} tok/s")
    (out / f"profile_{name}.json").write_text(json.dumps({"decode": rows, "prefill": prow, "decode_us": plain_us,
                                                          "pp_s": pp_s}))


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    summary: list[str] = []
    for spec in sys.argv[2:]:
        try:
            profile_model(spec, out, summary)  # its engine is freed on return
            import cupy as cp

            cp.get_default_memory_pool().free_all_blocks()
        except Exception as e:  # keep going: one failing model must not lose the others' numbers
            import traceback

            traceback.print_exc()
            summary.append(f"{spec}: FAILED {type(e).__name__}: {e}")
    print("\n".join(["== summary =="] + summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
