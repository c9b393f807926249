"""Device time of one qwen3-30b-a3b MoE decode layer (E=2048, X=128 experts, k=8, F=768; gate/up Q4_K,
down Q6_K or Q4_K): the fused path (router matvec, moe_route, moe_gu, moe_down) against the previous
7-launch sequence (router, moe_route, moe_mv gate, moe_mv up, glu, moe_mv down, moe_combine), per stage,
at T = 1 (decode) and T = 5 (verify), the router stage alone (moe_router's rows a block against its two halves
as separate launches), plus a sweep of moe_gu / moe_down (R, U) configs and of the int8 kernels'
(BW24_MOE_Q8: moe_gu8 / moe_down8).

python packages/bw24-engine/benchmarks/gpu_moe_decode.py [--no-sweep]

NL = 8 layers share one set of expert weights, each with a router that selects its own 8 experts, so a
replay reads 64 distinct experts (~170 MB > the 60 MB L2): weight bytes come from HBM, as in a model.
One captured graph replays the NL layers; median of 5 replays / NL = us per layer (graph-node cost in).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_decode_kernels import time_op  # noqa: E402  (graph-replay timing, CUDA events)

E, F, X, K_USED, NL = 2048, 768, 128, 8, 8


def routers(cu, x: np.ndarray) -> list:
    """Layer l's router gives experts 8l .. 8l+7 logits 4.0 + 0.1 i (others 0): distinct experts per layer."""
    from gguf.constants import GGMLQuantizationType as Q

    out = []
    for layer in range(NL):
        w = np.zeros((X, E), np.float32)
        for i in range(K_USED):
            w[K_USED * layer + i] = x * np.float32((4.0 + 0.1 * i) / float(x @ x))
        out.append(cu.weight_from_raw(f"router{layer}", w.view(np.uint8).reshape(-1), Q.F32, (X, E)))
    return out


def old_layer(cu, x, router, ge, ue, de, h, stage: int) -> None:
    """The 7-launch sequence this path replaced (moe_mv for gate, up, down; glu; moe_combine)."""
    from bw24.engine.ops.cuda import moe as M

    T = x.shape[0]
    S = T * K_USED
    rl = cu._buf("moe_rl", T * X).reshape(T, X)
    sel, wts = cu._buf("moe_sel", S, np.int32), cu._buf("moe_w", S)
    g, u = cu._buf("moe_g", S * F).reshape(S, F), cu._buf("moe_u", S * F).reshape(S, F)
    d = cu._buf("moe_d", S * E).reshape(S, E)
    cu.matmul(router, x, out=rl)
    cu._launch(cu._k("moe.cu", "moe_route"), (T,), 32, (rl, np.int32(X), np.int32(K_USED), np.int32(1), sel, wts))
    if stage >= 1:
        M._mv(cu, ge, sel, K_USED, x, 0, F, g)
        M._mv(cu, ue, sel, K_USED, x, 0, F, u)
        cu.glu(g, u, "silu", out=g)
    if stage >= 2:
        M._mv(cu, de, sel, K_USED, g, 1, E, d)
        M._combine(cu, d, wts, K_USED, h, h)


def new_layer(cu, x, router, ge, ue, de, h, stage: int) -> None:
    """ops/cuda/moe.py's decode path cut after stage 0 (router + route), 1 (+ moe_gu) or 2 (+ moe_down)."""
    from bw24.engine.ops.cuda import moe as M

    if stage == 2:
        return cu.moe(x, router, ge, ue, de, n_used=K_USED, norm_weights=True, act="silu", out=h, residual=h)
    T = x.shape[0]
    S = T * K_USED
    rl = cu._buf("moe_rl", T * X).reshape(T, X)
    sel, wts = cu._buf("moe_sel", S, np.int32), cu._buf("moe_w", S)
    g = cu._buf("moe_g", S * F).reshape(S, F)
    cu.matmul(router, x, out=rl)
    cu._launch(cu._k("moe.cu", "moe_route"), (T,), 32, (rl, np.int32(X), np.int32(K_USED), np.int32(1), sel, wts))
    if stage == 1:
        L, R, U = M.decode_config(ge.fmt, E, "gu")
        cu._launch(cu._k("moe.cu", f"moe_gu<{ge.fmt},{R},{U}>"), (-(-F // (32 // L * R)), T),
                   32 * min(K_USED, M.MAX_WARPS),
                   (*ge.args(), *ue.args(), sel, np.int32(K_USED), x, np.int32(E), np.int32(F), np.int32(L),
                    np.int32(0), g), shared_mem=M.gu_smem(E))


def router_table(cu, xh: np.ndarray, rts: list) -> None:
    """The router stage alone (T = 1 and 5): the fused moe_router (the default) at 1, 2, 4 (ROUTER_WARPS) and 8
    router rows a block, each first checked to give the committed ROUTER_WARPS's logits and routing bit for bit,
    against its two halves as separate launches (the F32 router matvec on its table config, moe_route). At
    6e0baa5 (PDL=0 profile) moe_router took 8.7 us a layer for 1 MB of router weights, 419 of the 30B-A3B's
    2,371 us a token; at 8128fa9 the two launches 3.8 + 4.9 us."""
    print(f"\nrouter stage alone, us a layer (X={X}, E={E}, k={K_USED}); warps = router rows a block of moe_router")
    for T in (1, 5):
        try:  # a failing row is reported; the expert sweeps after this table still run
            print(f"  T={T}: " + router_row(cu, xh, rts, T), flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"  T={T}: FAILED {type(e).__name__}: {e}", flush=True)


def router_row(cu, xh: np.ndarray, rts: list, T: int) -> str:
    from bw24.engine.ops.cuda import moe as M

    x = cu._put(np.tile(xh, (T, 1)))
    S = T * K_USED
    rl, sel, wts = cu.zeros((T, X)), cu.zeros((S,), np.int32), cu.zeros((S,))

    def fused(i: int) -> None:
        M.router_launch(cu, rts[i], x, K_USED, True, rl, sel, wts)

    def route() -> None:
        cu._launch(cu._k("moe.cu", "moe_route"), (T,), 32, (rl, np.int32(X), np.int32(K_USED), np.int32(1), sel, wts))

    def bits() -> tuple:
        fused(NL - 1)
        return tuple(cu.to_host(a).tobytes() for a in (rl, sel, wts))

    from bw24.engine.kernel_check import setting

    want = bits()

    def timed(warps: int) -> str:
        """The fused router at `warps` rows a block (moe.ROUTER_WARPS): checked against `want` bit for bit, then
        timed."""
        with setting(M, "ROUTER_WARPS", warps):
            same = bits() == want
            t = time_op(cu, lambda: [fused(i) for i in range(NL)], 1) / NL if same else float("nan")
        return f"warps={warps} {t:6.2f}" + ("" if same else " (WRONG: other bits, not timed)")

    cells = [timed(w) for w in (1, 2, 4, 8)]
    mv = time_op(cu, lambda: [cu.matmul(rts[i], x, out=rl) for i in range(NL)], 1) / NL
    rt = time_op(cu, lambda: [route() for _ in range(NL)], 1) / NL
    return "moe_router " + "  ".join(cells) + f"  |  matvec {mv:6.2f} + moe_route {rt:6.2f}"


def main(sweep: bool = True) -> None:
    from bw24.engine.ops.cuda import CudaOps
    from bw24.engine.ops.cuda import moe as M
    from bw24.engine.ops.cuda.repack import random_raw
    from gguf.constants import GGMLQuantizationType as Q

    cu, rng = CudaOps(), np.random.default_rng(0)
    # the paths this table times stage by stage (new_layer's stages 0-1 spell out the router matvec, moe_route
    # and the fp32 moe_gu): the defaults since 2c3a1bc (int8 experts, the fused router) off; the sweep below
    # turns the int8 experts on for its own half
    cu.moe_q8 = cu.moe_router_fuse = False
    print(f"building X={X} experts (E={E}, F={F}) on the host ...", flush=True)
    ge = cu.weight_from_raw("gate_exps", random_raw(Q.Q4_K, X * F, E, rng), Q.Q4_K, (X, F, E))
    ue = cu.weight_from_raw("up_exps", random_raw(Q.Q4_K, X * F, E, rng), Q.Q4_K, (X, F, E))
    downs = {q.name: cu.weight_from_raw(f"down_{q.name}", random_raw(q, X * E, F, rng), q, (X, E, F))
             for q in (Q.Q6_K, Q.Q4_K)}
    xh = rng.standard_normal(E).astype(np.float32)
    rts = routers(cu, xh)
    per_expert = (ge.nbytes + ue.nbytes) / X

    def run(layer_fn, T: int, de, stage: int) -> float:
        x = cu._put(np.tile(xh, (T, 1)))
        h = cu.zeros((T, E))
        return time_op(cu, lambda: [layer_fn(cu, x, rts[i], ge, ue, de, h, stage) for i in range(NL)], 1) / NL

    print(f"{'path':<44} {'T':>2} {'route':>8} {'+gate/up':>9} {'+down':>8} {'layer':>8} {'GB/s':>7}  us")
    for dn, de in downs.items():
        nbytes = K_USED * (per_expert + de.nbytes / X)  # selected experts' bytes per token
        for T in (1, 5):
            for label, fn in (("old 7 launches", old_layer), ("new 4 launches", new_layer)):
                t = [run(fn, T, de, s) for s in range(3)]
                print(f"{label + f' (down {dn})':<44} {T:>2} {t[0]:8.2f} {t[1] - t[0]:9.2f} {t[2] - t[1]:8.2f} "
                      f"{t[2]:8.2f} {nbytes / t[2] / 1e3:7.0f}", flush=True)
    router_table(cu, xh, rts)
    if not sweep:
        return
    base = M.decode_config
    # fp32 kernels (moe_gu / moe_down), then the int8 ones (BW24_MOE_Q8's moe_gu8 / moe_down8: one row a segment;
    # at 8128fa9 moe_gu8 took 10 us a layer in 1.45 waves of 768 blocks, so fewer lanes a row, more groups each:
    # U = 4 is 384 blocks of 2 rows a warp, one wave; U = 8 192 blocks of 4, each lane 8 groups of gate and up
    # in flight; 10.1 us again at 6e0baa5, ~1.4 TB/s against the dense matvecs' 2.9-3.3)
    sweeps = ((False, (("gu", ((2, 2), (1, 2), (1, 1), (2, 1), (1, 4))), ("down", ((2, 3), (1, 3), (4, 3), (2, 1))))),
              (True, (("gu", ((1, 2), (1, 4), (1, 8), (1, 1))), ("down", ((1, 3), (1, 1), (1, 6))))))
    for int8, kinds in sweeps:
        cu.moe_q8 = int8
        print(f"\nsweep (T = 1, down Q6_K and Q4_K): {'moe_gu8 / moe_down8' if int8 else 'moe_gu / moe_down'} (R, U); "
              "L follows from U (decode_config)")
        for kind, choices in kinds:
            for R, U in choices:
                def cfg(fmt, K, k_, int8=False, R=R, U=U, kind=kind, swept=int8):  # decode_config's signature
                    if k_ != kind or fmt in M.WIDE or int8 != swept:
                        return base(fmt, K, k_, int8)
                    L = 8
                    while L < 32 and L * U < K // 32:
                        L *= 2
                    return L, R, U
                M.decode_config = cfg
                try:
                    ts = {dn: run(new_layer, 1, de, 2) for dn, de in downs.items()}
                except Exception as e:  # a config that does not compile or launch: say so, go on
                    print(f"  {kind} R={R} U={U}: FAILED {type(e).__name__}: {e}")
                    continue
                finally:
                    M.decode_config = base
                L = cfg(7 if kind == "gu" else 9, E if kind == "gu" else F, kind, int8)[0]
                print(f"  {kind:<4} R={R} U={U} L={L:>2}: "
                      + "  ".join(f"down {dn} {t:7.2f} us/layer" for dn, t in ts.items()), flush=True)
    cu.moe_q8 = False


if __name__ == "__main__":
    main(sweep="--no-sweep" not in sys.argv[1:])
