"""kernel_check cases of the int8-activation matvec path (kernels/qmatvec_q8.cu, ops/cuda/q8.py).

Each case forces path "q8" for its quant type through the launch-config override, runs the cuda op
and compares with matmul_q8_ref: the activation quantized by the bit-exact NumPy twin of quantize_x,
dequantized, times the dequantized weight in float64 (tolerance class "matmul_q8").
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from gguf.constants import GGMLQuantizationType as Q

from .kernel_cases import Case, _dev, _weight
from .kernel_check import compare
from .ops.cuda.q8 import matmul_q8_ref, quantize_x_ref, unpack_xs

Q8_FORMATS = (Q.Q4_K, Q.Q6_K, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_K)
KQ = (Q.Q4_K, Q.Q5_K, Q.Q6_K)


def _k_for(qt) -> int:
    return 768 if qt in KQ else 544  # 24 / 17 groups: lanes left idle


class _forced:
    """Force {warps, rows, path: q8} for some quant types while a case runs."""

    def __init__(self, cu, qts, warps=4, rows=8):
        self.cu, self.names, self.cfg = cu, sorted({q.name for q in qts}), {"warps": warps, "rows": rows, "path": "q8"}

    def __enter__(self):
        for n in self.names:
            self.cu.set_launch_config("qmatvec", n, self.cfg)

    def __exit__(self, *exc):
        for n in self.names:
            self.cu.set_launch_config("qmatvec", n, None)


def _x(rng, T, k) -> np.ndarray:
    x = (rng.standard_normal((T, k)) * rng.uniform(0.1, 10, (T, 1))).astype(np.float32)
    x[0, 32:64] = 0.0  # an all-zero group: d = 0, every q = 0
    x[-1, 64] = 50.0  # an outlier group: the rest of it quantizes to small codes
    return x


def quantize_case(T: int, k: int) -> Case:
    """quantize_x is bit-identical to its NumPy twin (codes, scales, half-group sums)."""
    def run(name, ref, cu, rng):
        from .ops.cuda import q8

        x = _x(rng, T, k)
        x[-1, 0] = 31.75  # max |x| = 127 * 0.25: d = 0.25 exactly, so x / d below are exact .5 ties
        x[-1, 1:32] = (rng.integers(-100, 100, 31) + 0.5) * 0.25
        xq, xs = q8.quantize(cu, _dev(cu, x))
        dq, ds = unpack_xs(cu.to_host(xs).reshape(T, k // 32, 2))
        wq, wd, wsum = quantize_x_ref(x)
        got = np.concatenate([cu.to_host(xq).astype(np.float64), dq.view(np.int32).ravel(), ds.ravel()])
        want = np.concatenate([wq.ravel().astype(np.float64), wd.view(np.int32).ravel(), wsum.ravel()])
        return compare(name, "exact", got, want)
    return run


def matmul_case(qt, T, bias: bool, residual: bool, softcap: float = 0.0, cfg=(4, 8)) -> Case:
    def run(name, ref, cu, rng):
        n, k = 333, _k_for(qt)
        ti = _weight(qt, n, k, rng, name)
        x = _x(rng, T, k)
        b = rng.standard_normal(n).astype(np.float32) if bias else None
        r = rng.standard_normal((T, n)).astype(np.float32) if residual else None
        want = matmul_q8_ref(ref.load_weight(ti).data, x, b, r, softcap)
        out = _dev(cu, r) if residual else cu.zeros((T, n))
        with _forced(cu, [qt], *cfg):
            cu.matmul(cu.load_weight(ti), _dev(cu, x), out=out, bias=None if b is None else _dev(cu, b),
                      residual=out if residual else None, softcap=softcap)  # residual aliases out
        return compare(name, "matmul_q8", cu.to_host(out), want)
    return run


def multi_case(qts, T, bias: bool, cfg=(4, 8)) -> Case:
    def run(name, ref, cu, rng):
        k = 768 if any(q in KQ for q in qts) else 544
        ns = (301, 77, 45)[: len(qts)]
        tis = [_weight(q, n, k, rng, f"{name}.w{i}") for i, (q, n) in enumerate(zip(qts, ns, strict=True))]
        x = _x(rng, T, k)
        bs = [rng.standard_normal(n).astype(np.float32) if bias else None for n in ns]
        want = [matmul_q8_ref(ref.load_weight(t).data, x, b) for t, b in zip(tis, bs, strict=True)]
        outs = [cu.zeros((T, n)) for n in ns]
        with _forced(cu, qts[:1], *cfg):
            cu.matmul_multi([cu.load_weight(t) for t in tis], _dev(cu, x), outs=outs,
                            biases=[None if b is None else _dev(cu, b) for b in bs])
        return compare(name, "matmul_q8", np.concatenate([cu.to_host(o).ravel() for o in outs]),
                       np.concatenate([w.ravel() for w in want]))
    return run


def decode_verify_case(qt, cfg, multi: bool = False) -> Case:
    """Row t of a T-token q8 launch is bit-identical to the T = 1 launch (verify == decode), at
    T = 3, 9, 16 (NT buckets 4 and 16) and K long enough that each thread walks several groups."""
    def run(name, ref, cu, rng):
        n, k = 67, 4352  # 136 groups / 17 superblocks
        ws = [cu.load_weight(_weight(qt, n + 13 * i, k, rng, f"{name}.{i}")) for i in range(2 if multi else 1)]
        x = _dev(cu, rng.standard_normal((16, k)).astype(np.float32))

        def mm(xx, T):
            outs = [cu.zeros((T, w.n)) for w in ws]
            if multi:
                cu.matmul_multi(ws, xx, outs=outs)
            else:
                cu.matmul(ws[0], xx, out=outs[0])
            return np.concatenate([cu.to_host(o) for o in outs], axis=1)

        with _forced(cu, [qt], *cfg):
            ones = np.concatenate([mm(x[t:t + 1], 1) for t in range(16)])
            many = np.concatenate([mm(x[:T], T) for T in (3, 9, 16)])
        want = np.concatenate([ones[:3], ones[:9], ones[:16]])
        return compare(name, "exact", many, want)
    return run


def cases() -> Iterator[tuple[str, Case]]:
    yield "q8 quantize_x T=3 K=544 (zero group, ties)", quantize_case(3, 544)
    yield "q8 quantize_x T=16 K=4096", quantize_case(16, 4096)
    for qt in Q8_FORMATS:
        for T, bias, res in ((1, False, False), (1, True, True), (3, False, True), (9, True, False),
                             (16, True, True)):
            yield f"q8 matmul {qt.name:<5} N=333 K={_k_for(qt)} T={T}{' +bias' if bias else ''}" \
                  f"{' +res' if res else ''}", matmul_case(qt, T, bias, res)
    yield "q8 matmul Q6_K T=1 W=1 R=4 softcap=30 (logits)", matmul_case(Q.Q6_K, 1, False, False, 30.0, (1, 4))
    yield "q8 matmul Q8_0 T=1 W=4 R=16 softcap=30 (logits)", matmul_case(Q.Q8_0, 1, False, False, 30.0, (4, 16))
    for qts, T, bias in (((Q.Q4_K, Q.Q4_K, Q.Q6_K), 1, False), ((Q.Q8_0, Q.Q8_0, Q.Q8_0), 1, True),
                         ((Q.Q4_K, Q.Q4_K), 1, False), ((Q.Q4_0, Q.Q4_0, Q.Q4_0), 5, True),
                         ((Q.Q5_0, Q.Q5_0, Q.Q8_0), 1, True), ((Q.Q4_1, Q.Q4_1), 9, False),
                         ((Q.Q4_K, Q.Q4_K, Q.Q6_K), 16, False)):
        yield f"q8 matmul_multi {'+'.join(q.name for q in qts)} T={T}{' +bias' if bias else ''}", \
            multi_case(qts, T, bias)
    for qt, cfg, multi in ((Q.Q4_K, (4, 8), False), (Q.Q6_K, (1, 4), False), (Q.Q8_0, (4, 16), False),
                           (Q.Q4_0, (2, 4), False), (Q.Q4_1, (8, 2), False), (Q.Q5_0, (1, 1), False),
                           (Q.Q5_K, (4, 4), False), (Q.Q4_K, (4, 8), True)):
        yield f"q8 decode==verify bitwise {qt.name:<5} K=4352 W={cfg[0]} R={cfg[1]}{' multi' if multi else ''}" \
              f" T=3,9,16", decode_verify_case(qt, cfg, multi)
