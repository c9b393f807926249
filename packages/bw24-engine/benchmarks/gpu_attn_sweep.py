"""Device time of one decode step's attention a layer at the perf cells' shapes, across the settings of the deep
rows: attn_split against the tensor-core pass 1 (attention_dec_mma.cu), its split count (BW24_ATTN_DECODE), its
cp.async pipe (BW24_ATTN_DEC_PIPE), the blocks an SM it is built for (BW24_ATTN_DEC_BOUNDS) and the blocks' merge
(BW24_ATTN_MERGE_FACTORS=0: per element, as before) and its tile copies (BW24_ATTN_DEC_UNROLL=0: the loop, as
before). The d4096 perf cells cost ~1.5 minutes a setting (the 32B's load, llama.cpp's
arm); this sweeps them all in about one.

python packages/bw24-engine/benchmarks/gpu_attn_sweep.py [--depths 4096,16384] [--shapes 32b,30b-a3b,8b,0.6b]

NL layers with their own float16 caches (8 kv heads x 4,160 keys x 128 dims x K and V = 17 MB a layer at 4,096
keys; NL x that > the 60 MB L2), so K / V come from HBM as in a model. One captured graph replays the NL layers
inside the depth class a step at that depth runs in (CudaOps.attn_class_of: at 4,096 keys the deep one, where one
token's step launches no attn_split beside the mma kernel); median of 5 replays / NL = us a layer, and the K / V
bytes of the live keys over that time. Every setting's output of layer 0 is compared with the first setting's of
its shape (today's default): the pipe must give its bits exactly (`bits` = 0), another split count or pass 1
differ within float16 rounding (`maxrel` printed). `no comb`: the same replay with attn_combine's launches dropped
(`without`), so us/layer minus it is what pass 2 as its own launch adds to the step. At 5107205 the fused pass 2
variants (BW24_ATTN_DEC_FUSE, BW24_ATTN_FUSE_ALL) lost to it in every row and were removed; attn_split's own fused
pass 2 (BW24_ATTN_FUSE, the table's fuse_combine) stays a row.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_decode_kernels import time_op  # noqa: E402  (graph-replay timing, CUDA events)

NL = 16
SHAPES = {"32b": (64, 8), "30b-a3b": (32, 4), "8b": (32, 8), "0.6b": (16, 8)}  # (q heads, kv heads), D = 128
D = 128


def settings(G: int) -> list[tuple[str, dict]]:
    """(label, CudaOps attributes) in the order measured: today's default for this G first (the reference of the
    bits: the tensor-core pass 1 past DEC_MMA_KEYS at DEC_MMA_SPLITS splits through the pipe where G >=
    DEC_MMA_MIN_G), attn_split alone and with its own fused pass 2 (BW24_ATTN_FUSE), then the tensor-core pass 1 at
    each split count with the pipe and without."""
    from bw24.engine.ops.cuda.attn import DEC_MMA_KEYS, DEC_MMA_MIN_G, DEC_MMA_SPLITS

    mma = G >= DEC_MMA_MIN_G
    base = {"attn_dec_mma": DEC_MMA_KEYS if mma else 0, "attn_dec_pipe": True, "attn_override": None, "attn_fuse": None,
            "attn_dec_bounds": 0, "attn_merge_factors": True, "attn_dec_unroll": True}
    out = [("default" + (f" (mma {DEC_MMA_SPLITS} +pipe)" if mma else " (attn_split)"), base)]
    # the builds before BW24_ATTN_MERGE_FACTORS and BW24_ATTN_DEC_BOUNDS's rule (their bits: `bits = 0`), and 2 blocks
    out.append(("per-element merge", {**base, "attn_merge_factors": False}))
    if mma:
        out.append(("copy loop", {**base, "attn_dec_unroll": False}))  # (BW24_ATTN_DEC_UNROLL=0: bits = 0 expected)
        out += [("bounds 4", {**base, "attn_dec_bounds": 4}), ("bounds 2", {**base, "attn_dec_bounds": 2}),
                ("bounds 4, per-element merge", {**base, "attn_dec_bounds": 4, "attn_merge_factors": False})]
    split = {**base, "attn_dec_mma": 0}
    if mma:
        out.append(("attn_split", split))
    out.append(("attn_split +fused pass 2", {**split, "attn_fuse": True}))  # (BW24_ATTN_FUSE: its last block)
    for ns in (66, DEC_MMA_SPLITS, 16):
        for pipe in (True, False):
            if mma and pipe and ns == DEC_MMA_SPLITS:
                continue  # the default row
            out.append((f"mma {ns} splits{' +pipe' if pipe else ''}",
                        {**base, "attn_dec_mma": DEC_MMA_KEYS, "attn_dec_pipe": pipe, "attn_override": {"max_splits": ns}}))
    return out


@contextmanager
def without(cu, names: set[str]):
    """cu with its launches of the kernels named `names` dropped (instance attributes over the backend's _k_with
    and _launch, removed after): a replay of the rest of the step. Launches are built through _k_with (_k calls
    it too), so a dropped kernel is one whose name is asked for there."""
    skip = object()
    k_with, launch = cu._k_with, cu._launch
    cu._k_with = lambda file, name, extra: skip if name in names else k_with(file, name, extra)
    cu._launch = lambda fn, *a, **kw: None if fn is skip else launch(fn, *a, **kw)
    try:
        yield
    finally:
        del cu._k_with, cu._launch


def main(argv: list[str] | None = None) -> int:
    import cupy as cp
    from bw24.engine.ops.cuda import CudaOps

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", default="4096,16384")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--tokens", default="1,5", help="rows a step: 1 (decode), 5 (a verify)")
    a = ap.parse_args(argv)
    cu, rng = CudaOps(), np.random.default_rng(0)
    print(f"{'shape':<9} {'keys':>6} {'T':>2}  {'setting':<30} {'us/layer':>9} {'no comb':>8} {'TB/s':>6}  vs first")
    for shape in a.shapes.split(","):
        H, Hkv = SHAPES[shape]
        G = H // Hkv
        for depth in (int(d) for d in a.depths.split(",")):
            S = depth + 64
            host = [rng.standard_normal((Hkv, S, D)).astype(np.float16) for _ in range(2)]  # (one draw: the
            caches = [tuple(cu._put(h) for h in host) for _ in range(NL)]  # L2 sees NL distinct copies)
            for T in (int(t) for t in a.tokens.split(",")):
                q, out = cu._put(rng.standard_normal((T, H, D)).astype(np.float32)), cu.zeros((T, H, D))
                pos = cu._put(np.array([depth - T], np.int32))  # the last row sees `depth` keys
                kv_bytes = NL * 2 * Hkv * depth * D * 2
                first = None
                for label, attrs in settings(G):
                    saved = {k: getattr(cu, k, None) for k in attrs}  # (attn_override: unset until a config is forced)
                    for k, v in attrs.items():
                        setattr(cu, k, v)
                    try:
                        with cu.attn_class_of(depth):
                            calls = [partial(cu.attention, q, kc, vc, pos, scale=D ** -0.5, softcap=None,
                                             window=None, out=out) for kc, vc in caches]
                            calls[0]()
                            # on cu's stream (non-blocking): at 1aeef0e cp.asnumpy read `out` on the legacy default
                            # stream, which does not wait for it, so a row could show the last setting's output or
                            # the zeros it was born with (each shape's 16,384-key T = 5 reference came back all
                            # zeros: "maxrel 6e+28" on every other setting); the bits column was not evidence
                            got = cu.to_host(out)
                            us = time_op(cu, lambda calls=calls: [c() for c in calls], 1) / NL
                            with without(cu, {"attn_combine"}):
                                us1 = time_op(cu, lambda calls=calls: [c() for c in calls], 1) / NL
                    finally:
                        for k, v in saved.items():
                            setattr(cu, k, v)
                    if first is None:
                        first, cmp = got, "(reference)"
                    else:
                        same = np.array_equal(got, first)
                        rel = float(np.max(np.abs(got - first)) / max(float(np.max(np.abs(first))), 1e-30))
                        cmp = "bits = 0" if same else f"maxrel {rel:.1e}"
                    print(f"{shape:<9} {depth:>6} {T:>2}  {label:<30} {us:9.2f} {us1:8.2f} {kv_bytes / NL / us / 1e6:6.2f}"
                          f"  {cmp}",
                          flush=True)
            del caches
            cp.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
