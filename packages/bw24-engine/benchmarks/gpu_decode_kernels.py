"""Device time per call of the decode-path kernels of issue 5 (attention, rmsnorm, rope_kv + qk-norm).

python packages/bw24-engine/benchmarks/gpu_decode_kernels.py [REPS]

Each op is called REPS (default 200) times inside one captured CUDA graph (as a decode step runs
them), the graph is replayed 5 times, and the median replay time / REPS is printed in µs per call;
that includes the ~0.5 µs graph-node cost of each launch. Shapes: qwen3-0.6b (H=16/8, D=128,
E=1024) and qwen3-8b (H=32/8, D=128, E=4096), attention at depths 64, 512, 4096 (T = 1 and T = 5).
"""

from __future__ import annotations

import statistics
import sys
from functools import partial

import numpy as np


def time_op(cu, fn, reps: int) -> float:
    import cupy as cp
    from bw24.runtime import CapturedGraph

    fn()  # compile, size scratch
    cu.synchronize()
    g = CapturedGraph(cu.stream).capture(lambda: [fn() for _ in range(reps)])
    ts = []
    for _ in range(5):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(cu.stream)
        g.replay()
        b.record(cu.stream)
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / reps)
    return statistics.median(ts)


def main(reps: int = 200) -> None:
    from bw24.engine.ops.cuda import CudaOps
    from bw24.engine.ops.cuda.attn import attn_geometry

    cu, rng = CudaOps(), np.random.default_rng(0)

    def dev(shape):
        return cu._put(rng.standard_normal(shape).astype(np.float32))

    print(f"{'op':<58} {'us/call':>8}")
    for name, H, Hkv, E in (("qwen3-0.6b", 16, 8, 1024), ("qwen3-8b", 32, 8, 4096)):
        D, S = 128, 4096 + 64
        kc, vc = dev((Hkv, S, D)), dev((Hkv, S, D))
        for T in (1, 5):
            q, out = dev((T, H, D)), cu.zeros((T, H, D))
            for depth in (64, 512, 4096):
                pos = cu._put(np.array([depth - 1], np.int32))
                ch, ns = attn_geometry(cu.qmv_configs.tuning, S, Hkv)
                call = partial(cu.attention, q, kc, vc, pos, scale=D ** -0.5, softcap=None, window=None, out=out)
                print(f"{name + f' attention T={T} depth={depth} (CH={ch}, grid {ns} splits)':<58} "
                      f"{time_op(cu, call, reps):8.2f}")
        for T in (1, 5):
            x, w, a, o = dev((T, E)), dev((E,)), dev((T, E)), cu.zeros((T, E))
            for add in (None, a):
                call = partial(cu.rmsnorm, x, w, 1e-6, out=o, add=add)
                label = f"{name} rmsnorm{'' if add is None else ' +add'} T={T} K={E}"
                print(f"{label:<58} {time_op(cu, call, reps):8.2f}")
            q, k, v = dev((T, H, D)), dev((T, Hkv, D)), dev((T, Hkv, D))
            qn, kn, pos = dev((D,)), dev((D,)), cu._put(np.array([100], np.int32))
            for norm in (False, True):
                kw = dict(q_norm=qn, k_norm=kn, norm_eps=1e-6) if norm else {}
                call = partial(cu.rope_kv, q, k, v, pos, kc, vc, base=1e6, freq_scale=1.0, rope_dim=D, mode="neox",
                               **kw)
                label = f"{name} rope_kv{' +qk-norm' if norm else ''} T={T} H={H}/{Hkv}"
                print(f"{label:<58} {time_op(cu, call, reps):8.2f}")

if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
