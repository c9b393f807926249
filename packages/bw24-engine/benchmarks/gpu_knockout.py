"""What each kernel family costs on a replayed decode step's critical path: the step's graph captured again
without that family's launches, timed beside the whole step.

python packages/bw24-engine/benchmarks/gpu_knockout.py OUTDIR PRESET[:QUANT[:DEPTH[:ROWS]]] [SET ...]

ROWS > 1: the replayed step is a speculative verify of ROWS ids instead (spec.device.FastVerifier's: forward of ROWS
rows with every row's logits, then the rows' argmax on the device), the MTP round's verify at ROWS = K + 1 = 4. Why:
issue 8's MTP round costs 1.78x a plain step (target 1.25x), mostly its verify, ~1.45 steps, while its matvecs alone
are ~1.14x a decode step's (the verify sweep at 5107205): this says which families hold the rest.

A SET is `+`-joined substrings of kernel names (`rmsnorm`, `rope_kv`, `attn_split+attn_combine+attn_dec_mma`);
each SET's launches are left out of the captured step. Under PDL a kernel's duration in a profile overlaps its
neighbours', so the per-kernel table (gpu_profile.py) cannot say what a fusion that removes a launch would save;
the step without it can (an upper bound: the fusion still has the work to do somewhere). The outputs of a step
with launches left out are wrong (stale activations), so this is a diagnostic, never a perf cell: it writes no
perf row and runs only dense models (a MoE step with stale router logits could route out of bounds).
Default SETs: each small family alone, all of them (the matvecs alone), and the matvecs (the rest alone).
Every row, the whole step's too, also leaves out `argmax_sample`: on a step's stale or NaN logits its token could
be out of the vocabulary, and the next step's embedding row would be read out of bounds; the token stays the one
sampled before the timing, one launch of ~5 us fewer in every row alike.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

STEPS = 64
ALWAYS = ("argmax_sample",)
SMALL = ("rmsnorm", "rope_kv", "attn_split+attn_combine+attn_dec_mma", "glu_q8")
MATVECS = "qmv8+qmv3+qmv+qmv8_3"


def default_sets() -> list[str]:
    return [*SMALL, "+".join(SMALL), MATVECS]


def knock_out(ops, patterns: tuple[str, ...]) -> dict[str, int]:
    """Patch ops (its _k_with and _launch, on the instance) so that launches of kernels whose name contains any of
    patterns are skipped; the returned counts grow per kernel name skipped. Names are learned where the backend
    asks for a kernel (_k_with), so a kernel object fetched before the patch is never skipped (the counts say
    which were). Undo: unknock(ops)."""
    names: dict[int, str] = {}
    skipped: dict[str, int] = {}
    k_with, launch = ops._k_with, ops._launch

    def k_with_named(file, name, extra):
        fn = k_with(file, name, extra)
        names[id(fn)] = name
        return fn

    def launch_unless(fn, grid, block, args, shared_mem=0):
        name = names.get(id(fn), "")
        if name and any(p in name for p in patterns):
            skipped[name] = skipped.get(name, 0) + 1
            ops._q8_ready = None  # as a launch would: nothing downstream may trust a mark
            return
        launch(fn, grid, block, args, shared_mem)

    ops._k_with, ops._launch = k_with_named, launch_unless
    return skipped


def unknock(ops) -> None:
    for attr in ("_k_with", "_launch"):
        ops.__dict__.pop(attr, None)


def split_rows(spec: str) -> tuple[str, int]:
    """PRESET[:QUANT[:DEPTH[:ROWS]]] -> (the rest for gpu_profile.parse_spec, ROWS: 1 unless given, at most 16)."""
    parts = spec.split(":")
    if len(parts) < 4:
        return spec, 1
    if len(parts) > 4 or not parts[3].isdigit() or not 1 <= int(parts[3]) <= 16:
        raise SystemExit(f"{spec!r}: use PRESET[:QUANT[:DEPTH[:ROWS]]], ROWS 1 .. 16 (a verify's rows)")
    return ":".join(parts[:3]), int(parts[3])


def verify_step(m, ops, rows: int, rng):
    """The replayed step of a verify of `rows` ids (spec.device.FastVerifier._step's: every row's logits, their
    argmax on the device); the ids are drawn once and stay in the buffer (the step never writes them)."""
    import numpy as np
    from bw24.engine.spec.device import DeviceIO

    io, ids = DeviceIO(ops), m.buf.view(rows).ids
    out = ops.zeros((2 * rows,), np.int32)
    ops.copy_from_host(ids, rng.integers(10, m.cfg.n_vocab - 10, size=rows).astype(np.int32))

    def step() -> None:
        io.argmax_rows(m.forward(rows, last_only=False), ids, out)

    return step


def main() -> int:
    import numpy as np
    from bw24.engine import Engine
    from bw24.engine.graph import decode_step
    from bw24.engine.sampling import SamplingParams
    from gpu_profile import model_file, parse_spec

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    spec, rows = split_rows(sys.argv[2])
    preset, quant, depth = parse_spec(spec)
    sets = sys.argv[3:] or default_sets()
    # (a verify's replays take ROWS positions each: room for ~200 of them past the decode knockout's cache)
    n_ctx = max(4096, depth + 256) + 256 + (200 * rows if rows > 1 else 0)
    eng = Engine.load(model_file(preset, quant), backend="cuda", n_ctx=n_ctx, progress=False)
    m, ops = eng.model, eng.ops
    if m.cfg.n_expert:
        raise SystemExit("knockout: dense models only (stale router logits could route out of bounds)")
    rng = np.random.default_rng(0)
    prompt = rng.integers(10, m.cfg.n_vocab - 10, size=max(depth, 1)).tolist()
    params = SamplingParams()
    name = f"{Path(str(preset)).name.removesuffix('.gguf')}-{quant}_d{depth}" + (f"_T{rows}" if rows > 1 else "")
    unit = "us/token" if rows == 1 else "us/step "
    what = "steps" if rows == 1 else f"{rows}-row verify steps"
    lines = [f"## knockout {name}: {STEPS} replayed {what} a row, at depth {depth}"]
    base = None
    for s in ["", *sets]:  # "" = the whole step, first
        m.kv.reset()
        m.feed(prompt)
        ops.sample(m.buf.logits[0], params, m.kv.pos, out=m.buf.view(1).ids)
        skipped = knock_out(ops, ALWAYS + tuple(p for p in s.split("+") if p))
        try:
            step = decode_step(m, params) if rows == 1 else verify_step(m, ops, rows, rng)
            run = ops.capture(step, keys=lambda: m.kv.n_past)
            for _ in range(3):  # eager, capture (the two calls that launch from Python), replay
                m.kv.reserve(rows)
                run()
            ops.synchronize()
            n_cap = {k: v // 2 for k, v in skipped.items() if k not in ALWAYS}
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(STEPS):
                    m.kv.reserve(rows)
                    run()
                ops.synchronize()
                best = min(best, (time.perf_counter() - t0) * 1e6 / STEPS)
        finally:
            unknock(ops)
        base = base or best
        left = ", ".join(f"{k} x{v}" for k, v in sorted(n_cap.items())) or "-"
        lines.append(f"{s or 'whole step':<48} {best:8.1f} {unit}  {base - best:+8.1f} us  "
                     f"({(base - best) / base:+6.1%})  left out a step: {left}")
        print(lines[-1], flush=True)
    (out / f"knockout_{name}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
