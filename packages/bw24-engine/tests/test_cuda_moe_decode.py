"""CI (no GPU) for the MoE decode path (ops/cuda/moe.py + kernels/moe.cu moe_gu / moe_down): the
dispatcher's real launches (kernel names, grids, blocks, shared memory, argument lists) are executed
by a NumPy twin of each kernel that follows the .cu's mapping (blocks, warps per slot, L-lane segments
of R rows, lane j summing groups j, j + L, ... in order, xor butterfly, glu expression, combine in j
order), and the result is compared with ref.moe. Also: T-independence (verify rows == decode rows),
the CI compile set, the swizzle, and the glu expression shared with elementwise.cu. The kernels
themselves run on the GPU in kernel_check ("moe decode ..." cases; tests/test_cuda_gpu.py)."""

from __future__ import annotations

import contextlib
import re
from types import SimpleNamespace

import numpy as np
import pytest
from bw24.engine.kernel_check import FakeTensor, compare
from bw24.engine.ops.cuda import moe as M
from bw24.engine.ops.cuda.kernels import COMPILE_SET, KERNEL_DIR
from bw24.engine.ops.cuda.q8 import butterfly_sum, dequantize_x_ref, moe_q8_ref, quantize_x_ref, unpack_xs
from bw24.engine.ops.cuda.repack import FMT, SUPPORTED, random_raw, reconstruct, repack
from bw24.engine.ops.ref import RefOps
from bw24.runtime import has_gpu, no_gpu_reason
from gguf.constants import GGMLQuantizationType as Q

f32 = np.float32
MOE_CU = (KERNEL_DIR / "moe.cu").read_text()
SOURCES = {"moe.cu": MOE_CU, "qmatvec_q8.cu": (KERNEL_DIR / "qmatvec_q8.cu").read_text()}


class FakeW:
    """A stand-in QWeight: planes repacked on the host, decoded as the kernels decode them."""

    def __init__(self, ti: FakeTensor):
        p = repack(ti.raw, ti.qtype, ti.shape)
        self.ti, self.fmt, self.n, self.k, self.shape = ti, p.fmt, p.n, p.k, tuple(ti.shape)
        self.qtype = ti.qtype
        self.w = reconstruct(p)  # [rows, K] float32

    def args(self):
        return (self, None, None, None)  # plane a carries the handle; b, c, d as the real 4 pointers


def n_params(kernel: str, file: str = "moe.cu") -> int:
    """Parameter count of a kernel's signature in its .cu (guards the dispatcher's argument order)."""
    m = re.search(rf"\b{kernel}\(([^)]*)\)\s*{{", SOURCES[file])
    assert m, kernel
    return len(m.group(1).split(","))


def glu_out(g, u, act):  # common.cuh glu_act(g, act) * u, in float32
    g, u = f32(g), f32(u)
    if act == 0:
        with np.errstate(over="ignore"):  # e^-g -> inf for g << 0: a = -0, as on the device
            a = g / (f32(1) + np.exp(-g))
    else:
        a = f32(0.5) * g * (f32(1) + np.tanh(f32(0.7978845608028654) * (g + f32(0.044715) * g * g * g)))
    return f32(a * u)


class Emu:
    """Executes the recorded launches of ops/cuda/moe.py with NumPy twins of the moe.cu kernels."""

    def __init__(self, planted: bool = False, moe_q8: bool = False):
        self.ref, self.planted, self.stream = RefOps(), planted, contextlib.nullcontext()
        # CudaOps' activation state as ops/cuda/moe.py q8_experts reads it, and the q8 scratch's ready mark
        self.moe_q8, self.quantizes_activations = moe_q8, True
        self.qmv_configs, self._q8_ready = SimpleNamespace(force_path=None), None
        self.emulating = False  # CudaOps.emulate_rounding (the gate's rounding alone)
        self.moe_router_fuse = False  # BW24_MOE_ROUTER
        self.routing = None  # the gate's routing pin (CudaOps.pin_routing)
        self.scratch: dict[str, np.ndarray] = {}
        self.launches: list[tuple[str, tuple, tuple, int]] = []

    def _buf(self, key, n, dtype=np.float32, *, zeroed=False):
        a = self.scratch.get(key)
        if a is None or a.size < n:
            fill = 0 if zeroed else np.nan if dtype == np.float32 else -1
            a = self.scratch[key] = np.full(max(n, 1), fill, dtype)
        return a[:n]

    def to_host(self, a):
        return np.array(a)

    def copy_from_host(self, dst, src):
        assert dst.shape == np.shape(src)
        dst[...] = src

    def matmul(self, w, x, *, out):
        """The router: the reference's own product (so routing is the same), row by row (T-independent
        bits, as the device matvec: NumPy's T = 1 sgemv and T > 1 sgemm round differently)."""
        for t in range(x.shape[0]):
            self.ref.matmul(self.ref.load_weight(w.ti), x[t:t + 1], out=out[t:t + 1])

    def glu(self, g, u, act, *, out):
        out[...] = np.vectorize(lambda a, b: glu_out(a, b, M.ACTIVATIONS.index(act)), otypes=[f32])(g, u)

    def _launch(self, fn, grid, block, args, shared_mem=0):
        fn(grid, (block,), args, shared_mem=shared_mem)

    def _k(self, file, name):
        assert file == "moe.cu" or (file, name) in (("qmatvec_q8.cu", "quantize_x"), ("qmatvec_q8.cu", "round_x_q8"))
        base, _, targs = name.partition("<")
        tp = tuple(int(v) for v in targs.rstrip(">").split(",")) if targs else ()

        def fn(grid, block, args, shared_mem=0):
            self.launches.append((name, tuple(grid), tuple(block), shared_mem))
            n = n_params(base, file)
            assert len(args) == n, f"{name}: {len(args)} args for {n} parameters"
            getattr(self, base)(tp, tuple(grid), block[0], args, shared_mem)
        return fn

    # ---- kernel twins ----------------------------------------------------------------------------
    def moe_route(self, tp, grid, block, args, smem, first=0):
        logits, X, k, norm, sel, wts = args
        for t in range(first, grid[0]):
            lg = logits.reshape(-1, X)[t].astype(np.float64)
            p = np.exp(lg - lg.max())
            p /= p.sum()
            s = np.argsort(-p, kind="stable")[:k]  # ties: lower index (better_d)
            pw = p[s] / p[s].sum() if norm else p[s]
            sel[t * k:(t + 1) * k], wts[t * k:(t + 1) * k] = s, pw.astype(f32)

    def moe_router(self, tp, grid, block, args, smem):
        """One warp per router row: lane j's fmaf chain over columns 4j + 128i (float4 order), warp_sum's xor
        butterfly; the last block of each token (its ticket re-armed) routes it as moe_route does."""
        w, x, E, X, k, norm, rl, tickets, sel, wts = args
        nw = block // 32
        assert grid[0] == -(-X // nw)
        for t in range(grid[1]):
            self._router_rows(w.w, x, E, X, t, rl)
            self.moe_route((), (t + 1,), 32, (rl, X, k, norm, sel, wts), 0, first=t)
            assert tickets[t] == 0  # re-armed by the last block

    def moe_router_norm(self, tp, grid, block, args, smem):
        """moe_router with the input RMSNorm in front: each token's x = the reference's rmsnorm of h (the twin does
        not replay rmsnorm_reg's sum order: the device's bits are kernel-check's business), its int8 rows when given
        (quantize_x's twin), then moe_router's rows and route. The block is rmsnorm_reg's for E (NV = tp[0])."""
        from bw24.engine.ops.cuda.norm import rmsnorm_shape

        w, h, nw, eps, x, xq, xs, E, X, k, norm, rl, tickets, sel, wts = args
        assert (4, tp[0], block) == rmsnorm_shape(E, True) and smem == 4 * E
        assert grid[0] == -(-X // (block // 32))
        T = grid[1]
        self.ref.rmsnorm(h.reshape(-1, E)[:T].copy(), nw, float(eps), out=x.reshape(-1, E)[:T])
        if not isinstance(xq, np.uintp):
            self.quantize_x((), None, None, (x, T, E, xq, xs), 0)
        self.moe_router((), grid, block, (w, x, E, X, k, norm, rl, tickets, sel, wts), 0)

    @staticmethod
    def _router_rows(W, x, E, X, t, rl):
        """moe.cu router_row for every row of token t: lane j's fmaf chain over columns 4j + 128i (float4 order),
        warp_sum's xor butterfly (W: the F32 router's rows, as plane a holds them)."""
        xt = x.reshape(-1, E)[t]
        for row in range(X):
            lanes = np.zeros(32, f32)
            for j in range(32):
                acc = f32(0)
                for c in range(4 * j, E, 128):
                    for q in range(4):  # fmaf: one rounding of a * b + acc
                        acc = f32(np.float64(W[row, c + q]) * np.float64(xt[c + q]) + np.float64(acc))
                lanes[j] = acc
            rl.reshape(-1)[t * X + row] = butterfly_sum(lanes)

    def _lane_sums(self, W, rows, x, K, L):
        """moe.cu Seg: per row, lane j's fp32 sum over groups j, j + L, ..., then the xor butterfly."""
        G = K // 32
        g_end = G - 1 if self.planted else G
        gd = (W[rows].reshape(len(rows), G, 32) * x.reshape(G, 32)).sum(-1, dtype=f32)  # group dots
        acc = np.zeros((len(rows), L), f32)
        for g0 in range(0, g_end, L):
            js = np.arange(L)
            ok = g0 + js < g_end
            acc[:, ok] = acc[:, ok] + gd[:, (g0 + js)[ok]]
        o = L // 2
        while o:
            acc = acc + acc[:, np.arange(L) ^ o]
            o //= 2
        assert np.array_equal(acc, acc[:, :1].repeat(L, 1))  # every lane holds the same sum
        return acc[:, 0]

    def _geometry(self, grid, block, L, R, k):
        assert block % 32 == 0 and 32 <= block <= 32 * M.MAX_WARPS, block  # __launch_bounds__(256, 2)
        nw = block // 32
        assert nw <= k, "a warp without a slot would skip moe_gu's __syncthreads"
        assert L in (8, 16, 32) and R <= L
        return nw, 32 // L * R

    def moe_gu(self, tp, grid, block, args, smem):
        F, R, U = tp
        gw, _, _, _, uw, _, _, _, sel, k, x, K, N, L, act, out = args
        assert gw.fmt == uw.fmt == F and (L, R, U) == M.decode_config(F, K, "gu")
        _, rb = self._geometry(grid, block, L, R, k)
        assert 4 * M.xs_floats(K) <= smem <= M.SMEM_MAX
        assert grid[0] * rb >= N
        self._gu_blocks(grid, rb, k, N, K, L, gw, uw, sel, x.reshape(-1, K), act, out)

    def _gu_blocks(self, grid, rb, k, N, K, L, gw, uw, sel, xx, act, out):
        """moe_gu / moe_gu8's blocks: RB rows (segment seg's rows n0 + r = bx*RB + seg*R + r) of every slot's
        gate and up, then the glu expression."""
        out2 = out.reshape(-1, N)
        for t in range(grid[1]):
            for bx in range(grid[0]):
                n = bx * rb + np.arange(rb)
                for s in range(k):
                    slot = t * k + s
                    rows = int(sel[slot]) * N + np.minimum(n, N - 1)
                    a = self._lane_sums(gw.w, rows, xx[t], K, L)
                    b = self._lane_sums(uw.w, rows, xx[t], K, L)
                    for i in np.nonzero(n < N)[0]:
                        out2[slot, n[i]] = glu_out(a[i], b[i], act)

    def moe_down(self, tp, grid, block, args, smem):
        F, R, U = tp
        dw, _, _, _, sel, wts, k, h, K, N, L, res, out = args
        assert dw.fmt == F and (L, R, U) == M.decode_config(F, K, "down")
        nw, rb = self._geometry(grid, block, L, R, k)
        assert 4 * (nw * M.xs_floats(K) + k * rb) <= smem <= M.SMEM_MAX
        assert grid[0] * rb >= N and rb <= block
        self._down_blocks(grid, rb, k, N, K, L, dw, sel, wts, h.reshape(-1, K), res, out)

    def _down_blocks(self, grid, rb, k, N, K, L, dw, sel, wts, hh, res, out):
        """moe_down / moe_down8's blocks: RB rows of every slot's down projection, then the combine."""
        o2 = out.reshape(-1, N)
        r2 = None if isinstance(res, np.uintp) else res.reshape(-1, N)
        for t in range(grid[1]):
            for bx in range(grid[0]):
                n = bx * rb + np.arange(rb)
                dsm = np.zeros((k, rb), f32)
                for s in range(k):
                    slot = t * k + s
                    dsm[s] = self._lane_sums(dw.w, int(sel[slot]) * N + np.minimum(n, N - 1), hh[slot], K, L)
                for i in np.nonzero(n < N)[0]:  # thread i: combine in slot order, products and adds rounded
                    y = f32(0) if r2 is None else r2[t, n[i]]
                    for s in range(k):
                        y = f32(y + f32(wts[t * k + s] * dsm[s, i]))
                    o2[t, n[i]] = y

    # ---- the int8 path (BW24_MOE_Q8): activations as the kernels see them, dq(q(x)) (q8.quantize_x_ref) ----
    def quantize_x(self, tp, grid, block, args, smem):
        x, T, K, xq, xs = args
        q, d, sums = quantize_x_ref(x.reshape(-1, K)[:T])
        xq[: T * K] = q.ravel()
        packed = np.stack([d.view(np.int32), (sums[..., 0] & 0xFFFF) | (sums[..., 1] << 16)], axis=-1)
        xs[: T * K // 16] = packed.astype(np.int32).ravel()

    def round_x_q8(self, tp, grid, block, args, smem):
        x, T, K, y = args  # y may alias x
        y.reshape(-1, K)[:T] = dequantize_x_ref(x.reshape(-1, K)[:T]).astype(f32)

    @staticmethod
    def _dq(xq, xs, rows: int, K: int):
        """Rows of int8 codes + (scale bits, sums) slots -> the values d * q the int8 dots meet (float32)."""
        d, _ = unpack_xs(xs[: rows * K // 16].reshape(rows, K // 32, 2))
        q = xq[: rows * K].reshape(rows, K // 32, 32).astype(f32)
        return (q * d[..., None]).reshape(rows, K)

    def moe_gu8(self, tp, grid, block, args, smem):
        F, R, U = tp
        gw, _, _, _, uw, _, _, _, sel, k, xq, xs, K, N, L, act, out, tickets, hq, hs = args
        assert gw.fmt == uw.fmt == F and F in M.Q8_FMTS and (L, R, U) == M.decode_config(F, K, "gu", int8=True)
        _, rb = self._geometry(grid, block, L, R, k)
        # every block's rows in one 32-row group, whose blocks report to the (zeroed) ticket [t, group]
        assert smem == 0 and grid[0] * rb == N and N % 32 == 0 and 32 % rb == 0
        assert tickets.size >= grid[1] * N // 32 and not tickets[: grid[1] * N // 32].any()
        self._gu_blocks(grid, rb, k, N, K, L, gw, uw, sel, self._dq(xq, xs, grid[1], K), act, out)
        # each group's last block: quant_group32 of every slot's 32 values (quantize_x's bits)
        self.quantize_x(None, None, None, (out, grid[1] * k, N, hq, hs), 0)

    def moe_down8(self, tp, grid, block, args, smem):
        F, R, U = tp
        dw, _, _, _, sel, wts, k, hq, hs, K, N, L, res, out = args
        assert dw.fmt == F and F in M.Q8_FMTS and (L, R, U) == M.decode_config(F, K, "down", int8=True)
        nw, rb = self._geometry(grid, block, L, R, k)
        assert smem == 4 * k * rb and grid[0] * rb >= N
        self._down_blocks(grid, rb, k, N, K, L, dw, sel, wts, self._dq(hq, hs, grid[1] * k, K), res, out)

    def moe_mv(self, tp, grid, block, args, smem):
        w, _, _, _, sel, k, x, per_slot, K, N, out = args
        assert w.fmt == tp[0] and grid[0] * M.MOE_WARPS >= N
        xx, o2 = x.reshape(-1, K), out.reshape(-1, N)
        for slot in range(grid[1]):
            rows = int(sel[slot]) * N + np.arange(N)
            o2[slot] = self._lane_sums(w.w, rows, xx[slot if per_slot else slot // k], K, 32)

    def moe_combine(self, tp, grid, block, args, smem):
        d, wts, k, E, res, out = args
        d2, o2 = d.reshape(-1, E), out.reshape(-1, E)
        r2 = None if isinstance(res, np.uintp) else res.reshape(-1, E)
        for t in range(grid[1]):
            y = np.zeros(E, f32) if r2 is None else r2[t].copy()
            for j in range(k):
                y = (y + (wts[t * k + j] * d2[t * k + j]).astype(f32)).astype(f32)
            o2[t] = y


def weights(rng, qts, X, E, F):
    gq, uq, dq = qts
    router = FakeTensor("router", random_raw(Q.F32, X, E, rng), Q.F32, (X, E))
    ge = FakeTensor("gate_exps", random_raw(gq, X * F, E, rng), gq, (X, F, E))
    ue = FakeTensor("up_exps", random_raw(uq, X * F, E, rng), uq, (X, F, E))
    de = FakeTensor("down_exps", random_raw(dq, X * E, F, rng), dq, (X, E, F))
    return router, ge, ue, de


class DevArray(np.ndarray):
    """An ndarray with a device array's data.ptr (q8.quantize keys its ready mark on it)."""

    @property
    def data(self):
        return SimpleNamespace(ptr=self.__array_interface__["data"][0])


def run_emu(emu, tis, x, k, act="silu", residual=None):
    out = np.array(residual, f32) if residual is not None else np.zeros(x.shape, f32)
    x = np.ascontiguousarray(x).view(DevArray)
    M.moe(emu, x, *(FakeW(t) for t in tis), n_used=k, norm_weights=True, act=act, out=out,
          residual=out if residual is not None else None)
    return out


def run_ref(tis, x, k, act="silu", residual=None):
    ref, want = RefOps(), np.empty(x.shape, f32)
    ref.moe(x, *(ref.load_weight(t) for t in tis), n_used=k, norm_weights=True, act=act, out=want,
            residual=None if residual is None else residual.copy())
    return want


CASES = [  # (gate, up, down) types, T, X, k, E, F, act
    ((Q.Q4_K, Q.Q4_K, Q.Q6_K), 3, 5, 2, 2048, 256, "silu"),  # qwen3-30b-a3b's E: gu L=32, 2 rows per segment
    ((Q.Q4_K, Q.Q4_K, Q.Q4_K), 2, 4, 3, 512, 768, "gelu_tanh"),  # its F: down 8 lanes x 3 groups; gu L=8
    ((Q.Q8_0, Q.Q8_0, Q.Q8_0), 2, 6, 4, 544, 160, "silu"),  # 17 / 5 groups: lanes past the end
    ((Q.F16, Q.F16, Q.BF16), 1, 3, 2, 320, 96, "silu"),  # wide formats: one row, one group per batch
    ((Q.Q4_K, Q.Q5_K, Q.Q6_K), 2, 4, 2, 256, 256, "silu"),  # gate/up differ: moe_mv + glu fallback
    ((Q.Q4_0, Q.Q4_0, Q.Q4_0), 2, 3, 2, 64, 12288, "silu"),  # F too long to stage: moe_mv + moe_combine
]


@pytest.mark.parametrize("qts,T,X,k,E,F,act", CASES, ids=lambda v: getattr(v, "name", None))
def test_emulated_decode_kernels_match_reference(qts, T, X, k, E, F, act):
    rng = np.random.default_rng(11)
    tis = weights(rng, qts, X, E, F)
    x = rng.standard_normal((T, E)).astype(f32)
    r = rng.standard_normal((T, E)).astype(f32)
    emu = Emu()
    got = run_emu(emu, tis, x, k, act, r)
    res = compare("emu", "matmul", got, run_ref(tis, x, k, act, r))
    assert res.ok, res.line()
    fg, fu, fd = (FMT[q] for q in qts)
    gu = [f"moe_gu<{fg},{','.join(map(str, M.decode_config(fg, E, 'gu')[1:]))}>"] if fg == fu \
        else [f"moe_mv<{fg}>", f"moe_mv<{fu}>"]  # + ops.glu
    down = [f"moe_down<{fd},{','.join(map(str, M.decode_config(fd, F, 'down')[1:]))}>"] \
        if M.down_plan(F, k, fd) is not None else [f"moe_mv<{fd}>", "moe_combine"]
    assert [n for n, *_ in emu.launches] == ["moe_route", *gu, *down]


@pytest.mark.parametrize("fused", [False, True], ids=["moe_route", "moe_router"])
def test_routing_pin_runs_the_pinned_experts_with_weights_from_the_calls_own_logits(fused):
    """The gate's routing pin through the dispatcher (pin_routes after either router): a pin recorded on one
    input and replayed on another runs the recorded experts, weighted by softmax of the new router logits at
    them, as RefOps.moe does under the same pin; the new input's own top-k differs (counted as flips)."""
    from bw24.engine.routing_pin import RoutingPin

    rng = np.random.default_rng(5)
    qts, X, k, E, F = (Q.Q4_K, Q.Q4_K, Q.Q6_K), 8, 2, 256, 256
    tis = weights(rng, qts, X, E, F)
    x0, x1 = (rng.standard_normal((1, E)).astype(f32) for _ in range(2))

    def pinned_run(run):
        pin = RoutingPin()
        pin.begin()
        run(pin, x0)
        pin.end(1)
        pin.begin()
        out = run(pin, x1)
        pin.end(1)
        return pin, out

    def emu_run(pin, x):
        emu = Emu()
        emu.moe_router_fuse, emu.routing = fused, pin
        return run_emu(emu, tis, x, k)

    def ref_run(pin, x):
        ref, out = RefOps(), np.empty(x.shape, f32)
        ref.routing = pin
        ref.moe(x, *(ref.load_weight(t) for t in tis), n_used=k, norm_weights=True, act="silu", out=out)
        return out

    pe, got = pinned_run(emu_run)
    pr, want = pinned_run(ref_run)
    res = compare("emu", "matmul", got, want)
    assert res.ok, res.line()
    own = np.argsort(-(RefOps().load_weight(tis[0]).data @ x1[0]), kind="stable")[:k]  # x1's own routing
    assert not np.array_equal(np.sort(own), np.sort(pe.sel[0][0]))  # so the pin really overrode it ...
    assert pe.flips == pr.flips == 1 and pe.picks == 1  # ... and counted the flip
    assert not np.array_equal(got, run_emu(Emu(), tis, x1, k))  # unpinned, x1 runs other experts


INT8_CASES = [  # (gate, up, down) types, T, X, k, E, F
    ((Q.Q4_K, Q.Q4_K, Q.Q6_K), 2, 6, 3, 2048, 768),  # qwen3-30b-a3b's shapes: gu L=32, down 8 lanes x 3 groups
    ((Q.Q8_0, Q.Q8_0, Q.Q4_0), 3, 5, 2, 544, 160),  # 17 / 5 groups: lanes past the end
]


def run_q8_ref(tis, x, k, residual, h=None):
    dense = [RefOps().load_weight(t).data for t in tis]
    return moe_q8_ref(x, *dense, n_used=k, norm_weights=True, act="silu", residual=residual, h=h)


@pytest.mark.parametrize("qts,T,X,k,E,F", INT8_CASES, ids=lambda v: getattr(v, "name", None))
def test_emulated_int8_experts_match_q8_reference(qts, T, X, k, E, F):
    """BW24_MOE_Q8: quantize_x (no fused producer here), moe_route, moe_gu8, moe_down8, with the int8
    geometry; g against moe_q8_ref's, out against its down projection of the emulated g (two stages, as
    kernel_check's "moe decode q8" cases); T rows in one call == T one-row calls (verify == decode)."""
    rng = np.random.default_rng(17)
    tis = weights(rng, qts, X, E, F)
    x = rng.standard_normal((T, E)).astype(f32)
    r = rng.standard_normal((T, E)).astype(f32)
    emu = Emu(moe_q8=True)
    got = run_emu(emu, tis, x, k, residual=r)
    g = emu.scratch["moe_g"][: T * k * F].reshape(T * k, F)
    want_g, _ = run_q8_ref(tis, x, k, r)
    res = compare("emu g", "matmul_q8", g, want_g)
    assert res.ok, res.line()
    res = compare("emu out", "matmul_q8", got, run_q8_ref(tis, x, k, r, h=g)[1])
    assert res.ok, res.line()
    fg, fd = FMT[qts[0]], FMT[qts[2]]
    gu = f"moe_gu8<{fg},{','.join(map(str, M.decode_config(fg, E, 'gu', int8=True)[1:]))}>"
    down = f"moe_down8<{fd},{','.join(map(str, M.decode_config(fd, F, 'down', int8=True)[1:]))}>"
    assert [n for n, *_ in emu.launches] == ["quantize_x", "moe_route", gu, down]
    ones = np.concatenate([run_emu(Emu(moe_q8=True), tis, x[t:t + 1], k, residual=r[t:t + 1]) for t in range(T)])
    np.testing.assert_array_equal(ones, got)
    fp32 = run_emu(Emu(), tis, x, k, residual=r)  # the same call without BW24_MOE_Q8: the fp32 kernels
    assert not compare("fp32 vs int8", "matmul_q8", fp32, got).ok  # the int8 path really rounds x


@pytest.mark.parametrize("qts,T,X,k,E,F", INT8_CASES, ids=lambda v: getattr(v, "name", None))
def test_gate_emulation_rounds_the_experts_inputs_on_the_fp32_kernels(qts, T, X, k, E, F):
    """The gate's rounding alone (CudaOps.emulate_rounding) on a BW24_MOE_Q8 model inside exact_activations:
    the fp32 kernels (never moe_gu8 / moe_down8) on x and h rounded by round_x_q8, so g and the output meet
    moe_q8_ref, the int8 experts' own reference; without the emulation the same call is the fp32 path."""
    rng = np.random.default_rng(19)
    tis = weights(rng, qts, X, E, F)
    x = rng.standard_normal((T, E)).astype(f32)
    r = rng.standard_normal((T, E)).astype(f32)
    emu = Emu(moe_q8=True)
    emu.qmv_configs.force_path, emu.emulating = "f32", True
    got = run_emu(emu, tis, x, k, residual=r)
    g = emu.scratch["moe_g"][: T * k * F].reshape(T * k, F)  # h after its rounding, as moe_down read it
    want_g, _ = run_q8_ref(tis, x, k, r)
    res = compare("emulated g", "matmul_q8", g, dequantize_x_ref(want_g))
    assert res.ok, res.line()
    res = compare("emulated out", "matmul_q8", got, run_q8_ref(tis, x, k, r, h=want_g)[1])
    assert res.ok, res.line()
    fg, fd = FMT[qts[0]], FMT[qts[2]]
    gu = [f"moe_gu<{fg},{','.join(map(str, M.decode_config(fg, E, 'gu')[1:]))}>"]
    down = [f"moe_down<{fd},{','.join(map(str, M.decode_config(fd, F, 'down')[1:]))}>"] \
        if M.down_plan(F, k, fd) is not None else [f"moe_mv<{fd}>", "moe_combine"]
    assert [n for n, *_ in emu.launches] == ["moe_route", "round_x_q8", *gu, "round_x_q8", *down]
    plain = Emu(moe_q8=True)
    plain.qmv_configs.force_path = "f32"  # the exact half itself: nothing rounded
    assert "round_x_q8" not in [n for n, *_ in (run_emu(plain, tis, x, k, residual=r), plain.launches)[1]]
    off = Emu()  # BW24_MOE_Q8 off: the backend's experts run fp32, so the emulation rounds nothing there
    off.qmv_configs.force_path, off.emulating = "f32", True
    run_emu(off, tis, x, k, residual=r)
    assert "round_x_q8" not in [n for n, *_ in off.launches]


@pytest.mark.parametrize("moe_q8", [False, True])
def test_fused_router_is_one_launch_with_the_reference_routing(moe_q8):
    """BW24_MOE_ROUTER: the router matvec and moe_route as one moe_router launch (decode / verify rows, an F32
    router), the same routing and output as the two launches; T rows in one call == T one-row calls; prefill
    rows (T > 16), or the flag off, keep the two launches."""
    rng = np.random.default_rng(23)
    qts, T, X, k, E, F = (Q.Q8_0, Q.Q8_0, Q.Q4_0), 3, 40, 8, 544, 160  # E % 128 != 0: lanes past the row's end
    tis = weights(rng, qts, X, E, F)
    x = rng.standard_normal((T, E)).astype(f32)
    r = rng.standard_normal((T, E)).astype(f32)
    two = Emu(moe_q8=moe_q8)
    want = run_emu(two, tis, x, k, residual=r)
    one = Emu(moe_q8=moe_q8)
    one.moe_router_fuse = True
    got = run_emu(one, tis, x, k, residual=r)
    names = [n for n, *_ in one.launches]
    assert names[names.index("moe_router") + 1].startswith("moe_gu") and "moe_route" not in names
    assert one.launches[names.index("moe_router")][1:3] == ((10, T), (128,))
    np.testing.assert_array_equal(one.scratch["moe_sel"][: T * k], two.scratch["moe_sel"][: T * k])
    res = compare("fused router", "matmul", got, want)
    assert res.ok, res.line()
    rows = []
    for t in range(T):
        e = Emu(moe_q8=moe_q8)
        e.moe_router_fuse = True
        rows.append(run_emu(e, tis, x[t:t + 1], k, residual=r[t:t + 1]))
    np.testing.assert_array_equal(np.concatenate(rows), got)
    wide = weights(rng, (Q.Q4_K, Q.Q4_K, Q.Q4_K), 4, 256, 256)
    rnd = [FakeW(t) for t in wide]
    assert not M.fused_router(SimpleNamespace(moe_router_fuse=True), rnd[0], np.zeros((17, 256), f32).view(DevArray))
    assert not M.fused_router(SimpleNamespace(moe_router_fuse=False), rnd[0], np.zeros((1, 256), f32).view(DevArray))
    assert M.fused_router(SimpleNamespace(moe_router_fuse=True), rnd[0], np.zeros((1, 256), f32).view(DevArray))


@pytest.mark.parametrize("moe_q8", [False, True])
def test_router_norm_is_one_launch_before_the_experts_with_the_unfused_result(moe_q8):
    """BW24_MOE_ROUTER_NORM: the block's input RMSNorm, the router matvec and the routing as one moe_router_norm
    launch (rmsnorm_reg's block for E, 4 E bytes of shared memory), its int8 rows straight to the int8 experts
    (no quantize_x), and the unfused launches' result (rmsnorm then moe: the same twins); where norm_router's
    conditions fail (the flag off, prefill rows, a misaligned row, a row past the shared memory) it is not taken."""
    from bw24.engine.ops.cuda.norm import rmsnorm_shape

    rng = np.random.default_rng(29)
    qts, T, X, k, E, F = (Q.Q4_K, Q.Q4_K, Q.Q6_K), 2, 40, 8, 2048, 256
    tis = weights(rng, qts, X, E, F)
    h = (rng.standard_normal((T, E)) * 3).astype(f32).view(DevArray)
    nw = (1 + 0.1 * rng.standard_normal(E)).astype(f32).view(DevArray)
    r = rng.standard_normal((T, E)).astype(f32)
    two = Emu(moe_q8=moe_q8)
    two.moe_router_fuse = True
    x2 = np.zeros((T, E), f32)
    two.ref.rmsnorm(np.array(h), np.array(nw), 1e-6, out=x2)
    want = run_emu(two, tis, x2, k, residual=r)  # (its moe quantizes x2 itself: quantize_x's twin)
    one = Emu(moe_q8=moe_q8)
    one.moe_router_fuse, one.moe_norm_fuse = True, True
    x = np.zeros((T, E), f32).view(DevArray)
    assert M.norm_router(one, FakeW(tis[0]), h, x, nw)
    got = np.array(r, f32)
    M.moe(one, x, *(FakeW(t) for t in tis), n_used=k, norm_weights=True, act="silu", out=got, residual=got,
          normed=(h, nw, 1e-6))
    names = [n for n, *_ in one.launches]
    assert names[0] == f"moe_router_norm<{rmsnorm_shape(E, True)[1]}>" and "quantize_x" not in names
    assert names[1].startswith("moe_gu8" if moe_q8 else "moe_gu") and "moe_route" not in names
    assert one.launches[0][1:4] == ((-(-X // 16), T), (512,), 4 * E)
    np.testing.assert_array_equal(np.array(x), x2)
    np.testing.assert_array_equal(one.scratch["moe_sel"][: T * k], two.scratch["moe_sel"][: T * k])
    np.testing.assert_array_equal(got, want)
    router = FakeW(tis[0])
    assert not M.norm_router(SimpleNamespace(moe_router_fuse=True, moe_norm_fuse=False), router, h, x, nw)
    on = SimpleNamespace(moe_router_fuse=True, moe_norm_fuse=True)
    assert not M.norm_router(on, router, np.zeros((17, E), f32).view(DevArray), np.zeros((17, E), f32).view(DevArray), nw)
    odd = np.zeros(E + 1, f32)[1:].view(DevArray).reshape(1, E)  # 4 bytes off a 16-byte boundary
    assert not M.norm_router(on, router, odd, x[:1], nw)
    wide = FakeTensor("router", random_raw(Q.F32, 4, 12320, rng), Q.F32, (4, 12320))  # x's row past 48 KB
    assert not M.norm_router(on, FakeW(wide), np.zeros((1, 12320), f32).view(DevArray),
                             np.zeros((1, 12320), f32).view(DevArray), np.zeros(12320, f32).view(DevArray))


def test_int8_experts_need_the_int8_state():
    """q8_experts: only with moe_q8 on, the backend's activations on the int8 path (not the gate's exact
    half, force_path "f32"), and formats the int8 kernels have."""
    rng = np.random.default_rng(2)
    tis = weights(rng, (Q.Q4_K, Q.Q4_K, Q.Q6_K), 4, 256, 256)
    ws = [FakeW(t) for t in tis[1:]]
    emu = Emu(moe_q8=True)
    assert M.q8_experts(emu, *ws)
    emu.qmv_configs.force_path = "f32"
    assert not M.q8_experts(emu, *ws)
    emu.qmv_configs.force_path, emu.quantizes_activations = None, False
    assert not M.q8_experts(emu, *ws)
    assert not M.q8_experts(Emu(), *ws)
    wide = [FakeW(t) for t in weights(rng, (Q.F16, Q.F16, Q.F16), 4, 256, 256)[1:]]
    assert not M.q8_experts(Emu(moe_q8=True), *wide)
    emu = Emu(moe_q8=True)
    x = rng.standard_normal((3, 256)).astype(f32)
    run_emu(emu, tis, x, 2)
    assert "moe_gu8<7,1,2>" in [n for n, *_ in emu.launches]


def test_planted_dropped_group_is_caught():
    """Canary: the twin with the last group dropped (the kernels' BW24_PLANTED_BUG) fails the tolerance."""
    rng = np.random.default_rng(3)
    tis = weights(rng, (Q.Q4_K, Q.Q4_K, Q.Q6_K), 4, 512, 256)
    x = rng.standard_normal((2, 512)).astype(f32)
    res = compare("emu", "matmul", run_emu(Emu(planted=True), tis, x, 2), run_ref(tis, x, 2))
    assert not res.ok and res.rel > 1e-2, res.line()


def test_qwen3_30b_decode_is_four_launches_and_verify_rows_equal_decode_rows():
    """Router matvec, moe_route, moe_gu, moe_down per layer; T = 4 in one call gives the same bits
    per row as four T = 1 calls (the geometry depends on the weights, never on T)."""
    rng = np.random.default_rng(5)
    tis = weights(rng, (Q.Q4_K, Q.Q4_K, Q.Q6_K), 6, 2048, 768)
    x = rng.standard_normal((4, 2048)).astype(f32)
    r = rng.standard_normal((4, 2048)).astype(f32)
    emu = Emu()
    many = run_emu(emu, tis, x, 2, residual=r)
    assert [n for n, *_ in emu.launches] == ["moe_route", "moe_gu<7,2,2>", "moe_down<9,2,3>"]  # + router matmul
    ones = np.concatenate([run_emu(Emu(), tis, x[t:t + 1], 2, residual=r[t:t + 1]) for t in range(4)])
    np.testing.assert_array_equal(ones, many)


@pytest.mark.parametrize("kind", ["gu", "down"])
def test_decode_config_covers_every_row_length(kind):
    for fmt in range(10):
        for K in range(32, 16384 + 1, 32):
            L, R, U = M.decode_config(fmt, K, kind)
            G = K // 32
            assert L in (8, 16, 32) and R <= L and 32 // L * R <= 32
            assert L * U >= G or L == 32  # the fewest lanes that cover the groups in one batch
            assert f"moe_{kind}<{fmt},{R},{U}>" in COMPILE_SET["moe.cu"]
            if fmt in M.Q8_FMTS:  # the int8 kernels: the same lanes (a row's order), one row a segment
                assert M.decode_config(fmt, K, kind, int8=True) == (L, 1, U)
                assert f"moe_{kind}8<{fmt},1,{U}>" in COMPILE_SET["moe.cu"]
    assert M.decode_config(7, 2048, "gu") == (32, 2, 2)  # qwen3-30b-a3b: 64 groups, 2 per lane
    assert M.decode_config(9, 768, "down") == (8, 2, 3)  # 24 groups: 4 rows x 8 lanes x 3, no idle lane
    with pytest.raises(ValueError, match="kind"):
        M.decode_config(7, 2048, "up")


def test_fallback_kernels_are_in_the_compile_set():
    assert {f"moe_mv<{f}>" for f in range(10)} <= set(COMPILE_SET["moe.cu"])
    assert all(M.decode_config(q, 2048, "gu") for q in range(len(SUPPORTED)))


def test_swizzle_is_a_bijection_and_conflict_free():
    """moe.cu swz(g, i) = 8g + (i ^ g&7): each group keeps its 8 float4 slots, and 8 consecutive groups
    (one 128-bit shared-load phase) read their i-th float4 from 8 different bank quads."""
    swz = lambda g, i: 8 * g + (i ^ (g & 7))  # noqa: E731
    assert sorted(swz(g, i) for g in range(24) for i in range(8)) == list(range(192))
    for g0 in range(0, 64):
        for i in range(8):
            assert len({swz(g, i) % 8 for g in range(g0, g0 + 8)}) == 8
    assert "8 * g + (i ^ (g & 7))" in MOE_CU


def test_glu_expression_is_elementwise_glus():
    """The fused activation is glu's: both kernels call common.cuh glu_act, then multiply by up; the
    twin above (glu_out) spells out the same float expression."""
    ew = (KERNEL_DIR / "elementwise.cu").read_text()
    common = (KERNEL_DIR / "common.cuh").read_text()
    assert "glu_act(gate[i], act) * up[i]" in ew and "glu_act(sg.a[r], act) * sg.b[r]" in MOE_CU
    for expr in ("g / (1.f + expf(-g))", "0.5f * g * (1.f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)))"):
        assert expr in common


def route_twin(p: np.ndarray, k: int) -> list[int]:
    """moe.cu moe_route's selection rounds: each lane's better_d best of experts lane + 32 j, then the
    warp argmax as three reductions over (bits of p) + 1 and the lowest index among equal keys."""
    X, taken, sel = len(p), set(), []
    bits = p.astype(np.float64).view(np.uint64)
    for _ in range(k):
        keys, idx = np.zeros(32, np.uint64), np.full(32, 0x7FFFFFFF, np.int64)
        for lane in range(32):
            for x in range(lane, X, 32):  # better_d: larger p, then lower index
                if x not in taken and (idx[lane] == 0x7FFFFFFF or p[x] > p[idx[lane]]):
                    idx[lane] = x
            if idx[lane] != 0x7FFFFFFF:
                keys[lane] = bits[idx[lane]] + np.uint64(1)
        hi = (keys >> np.uint64(32)).max()
        lo = np.where((keys >> np.uint64(32)) == hi, keys & np.uint64(0xFFFFFFFF), 0).max()
        best = (hi << np.uint64(32)) | lo
        bi = int(np.where(keys == best, idx, 0xFFFFFFFF).min())
        assert bits[bi] + np.uint64(1) == best  # bv is recovered exactly from the key
        taken.add(bi)
        sel.append(bi)
    return sel


@pytest.mark.parametrize("X,k", [(128, 8), (60, 6), (1024, 32), (8, 8), (33, 5)])
def test_route_argmax_by_key_reductions_is_stable_descending_order(X, k):
    """The key-reduction argmax picks what the reference's stable descending sort picks, ties (to the
    lower expert index) and probabilities that underflow to 0 included."""
    rng = np.random.default_rng(X + k)
    for trial in range(4):
        lg = rng.standard_normal(X)
        if trial >= 1:
            lg[rng.integers(0, X, X // 3)] = lg.max()  # many exact ties at the top
        if trial >= 2:
            lg[rng.integers(0, X, X // 2)] = -1e4  # exp underflows: p = 0 exactly, tied
        p = np.exp(lg - lg.max())
        p /= p.sum()
        assert route_twin(p, k) == list(np.argsort(-p, kind="stable")[:k])


def test_gpu_moe_cases_green_and_planted_bug_red():
    if not has_gpu():
        pytest.skip(f"no CUDA GPU: {no_gpu_reason()}")
    from bw24.engine.kernel_check import main

    lines: list[str] = []
    assert main(seed=21, only="moe decode", out=lines.append) == 0, "\n".join(lines)
    bad: list[str] = []
    assert main(seed=21, variant="planted_bug", only="moe decode Q4_K", out=bad.append) == 1, "\n".join(bad)
    bad8: list[str] = []  # the int8 kernels share Seg's group loop: the dropped group turns them red too
    assert main(seed=21, variant="planted_bug", only="moe decode q8 Q4_K", out=bad8.append) == 1, "\n".join(bad8)
    assert sum(line.startswith("moe decode q8") and line.endswith(" FAIL") for line in bad8) >= 3, "\n".join(bad8)


# ---- BW24_MOE_GROUPED: the prefill FFN as grouped GEMMs on the device's routing (moe_mm.cu) ------------------

SOURCES["moe_mm.cu"] = (KERNEL_DIR / "moe_mm.cu").read_text()
SOURCES["prefill_gemm.cu"] = (KERNEL_DIR / "prefill_gemm.cu").read_text()


class GroupedEmu:
    """Executes grouped_ffn's launches with NumPy twins of moe_group, x_to_half and moe_mm (fp16 rows and
    weights, products in float64 then float32); a host read of the device (a sync) fails the test."""

    def __init__(self, moe_mm_kg: int = 1):
        self.scratch: dict[str, np.ndarray] = {}
        self.launches: list[tuple[str, tuple, int]] = []
        self.xh_regs = True
        self.moe_mm_kg = moe_mm_kg  # BW24_MOE_MM_KG

    def _buf(self, key, n, dtype=np.float32, *, zeroed=False):
        a = self.scratch.get(key)
        if a is None or a.size < n:
            a = self.scratch[key] = np.full(max(n, 1), np.nan if dtype == np.float32 else -7, dtype)
        return a[:n]

    def to_host(self, a):
        raise AssertionError("grouped_ffn read the device on the host")

    def _launch(self, fn, grid, block, args, shared_mem=0):
        fn(tuple(grid), block, args)

    def _k(self, file, name):
        base, _, targs = name.partition("<")
        tp = tuple(v for v in targs.rstrip(">").split(",")) if targs else ()

        def fn(grid, block, args):
            self.launches.append((name, grid, block))
            assert len(args) == n_params(base, file), f"{name}: {len(args)} args"
            getattr(self, base)(tp, grid, args)
        return fn

    def moe_group(self, tp, grid, args):
        sel, S, X, off, perm, te, tr, nt = args
        s = np.asarray(sel).reshape(-1)[:S]
        cnt = np.bincount(s, minlength=X)
        off[: X + 1] = np.concatenate([[0], np.cumsum(cnt)])
        perm[:S] = np.argsort(s, kind="stable")
        tiles = [(e, j * 64) for e in range(X) for j in range(-(-cnt[e] // 64))]
        assert len(tiles) <= te.size  # the grid bound holds
        nt[0] = len(tiles)
        te[: len(tiles)], tr[: len(tiles)] = [t[0] for t in tiles], [t[1] for t in tiles]

    def x_to_half(self, tp, grid, args):
        x, K, xh, xl, sx, q8, nw, eps, regs = args
        rows = np.asarray(x, np.float32).reshape(-1, K)[: grid[0]]
        m = np.abs(rows).max(axis=1)
        e = np.where(m > 0, np.floor(np.log2(np.maximum(m, 1e-38))), 0).astype(int) - 14
        sx[: len(rows)] = np.ldexp(1.0, e).astype(f32)
        xh[: rows.size] = (rows * np.ldexp(1.0, -e)[:, None]).astype(np.float16).ravel()

    def moe_mm(self, tp, grid, args):
        fmt, glu, kg = int(tp[0]), tp[1] == "true", int(tp[2])
        pw, pu = args[0], args[4]
        assert pw.fmt == fmt and pu.fmt == fmt  # the instance decodes the weights' own format
        N, K, xh, sx, rdiv, perm, off, te, tr, nt, act, out = args[8:]
        from bw24.engine.ops.cuda.moe_prefill import MM_KG

        assert (K // 32) % kg == 0 and kg in MM_KG[glu]  # whole stages, an instance kernels.py compiles
        assert grid[0] == -(-N // 64) and grid[1] >= nt[0]
        ws = [np.asarray(w.w, np.float16).astype(np.float64).reshape(-1, N, K) for w in ((pw, pu) if glu else (pw,))]
        A = np.asarray(xh).reshape(-1, K).astype(np.float64)
        for i in range(int(nt[0])):
            e, r0 = int(te[i]), int(tr[i])
            slots = perm[off[e] + r0: min(off[e + 1], off[e] + r0 + 64)]
            src = slots // rdiv
            ys = [(A[src] @ w[e].T).astype(f32) * sx[src][:, None] for w in ws]
            y = glu_out(ys[0], ys[1], act) if glu else ys[0]
            out.reshape(-1, N)[slots] = y


@pytest.mark.parametrize("kg", [1, 4])
@pytest.mark.parametrize("qts,T,X,k,E,F,kg4", [((Q.Q4_K, Q.Q4_K, Q.Q6_K), 40, 16, 4, 256, 256, (2, 4)),
                                              ((Q.Q8_0, Q.Q8_0, Q.Q4_0), 150, 6, 3, 544, 160, (1, 1))],
                         ids=lambda v: getattr(v, "name", None))
def test_grouped_ffn_launches_match_the_reference_without_a_host_read(qts, T, X, k, E, F, kg4, kg):
    """grouped_ffn: moe_group, x_to_half, moe_mm<gate, GLU, KG>, x_to_half of h, moe_mm<down, KG> (argument lists
    checked against the kernels' signatures, grids against the tiles), no host read of the routing; its d rows,
    summed by the reference's combine, meet ref.moe at the fp16 GEMM tolerance. BW24_MOE_MM_KG=4: the GLU form
    takes its largest instance (2), the down form 4 (160 and 544 columns: 5 and 17 groups, so KG = 1 there)."""
    from bw24.engine.kernel_check import TOL
    from bw24.engine.ops.cuda import moe_prefill as MP

    rng = np.random.default_rng(29)
    router, *tis = weights(rng, qts, X, E, F)
    x = rng.standard_normal((T, E)).astype(f32)
    ref = RefOps()
    logits = x @ ref.load_weight(router.ti if hasattr(router, "ti") else router).data.T
    from bw24.engine.ops.ref import route

    routes = route(logits, k, True)
    sel = np.concatenate([s for s, _ in routes]).astype(np.int32)
    emu = GroupedEmu(kg)
    d = np.full((T * k, E), np.nan, f32)
    gw, uw, dw = (FakeW(t) for t in tis)
    MP.grouped_ffn(emu, x, sel, gw, uw, dw, k, "silu", d)
    kgs = kg4 if kg == 4 else (1, 1)
    assert [n for n, *_ in emu.launches] == ["moe_group", "x_to_half", f"moe_mm<{gw.fmt},true,{kgs[0]}>", "x_to_half",
                                             f"moe_mm<{dw.fmt},false,{kgs[1]}>"]
    got = np.zeros((T, E), f32)
    for t, (_, w) in enumerate(routes):
        for j in range(k):
            got[t] += f32(w[j]) * d[t * k + j]
    want = np.empty((T, E), f32)
    ref.moe(x, ref.load_weight(router), *(ref.load_weight(t) for t in tis), n_used=k, norm_weights=True, act="silu",
            out=want)
    res = compare("grouped", "gemm16", got, want)
    assert res.ok and res.rel > TOL["matmul"] / 100, res.line()  # within fp16's class, and really rounded
    assert MP.grouped(SimpleNamespace(moe_grouped=True, prefill_precision="fp16"), gw, uw, E, F)
    assert [MP.mm_kg(w, 2048, True) for w in (1, 2, 4)] == [1, 2, 2]  # the 30B-A3B's gate/up: 64 groups
    assert [MP.mm_kg(w, 768, False) for w in (1, 2, 4)] == [1, 2, 4]  # its down: 24 groups
    assert [MP.mm_kg(4, K, False) for K in (160, 192, 544, 640)] == [1, 2, 1, 4]
    assert not MP.grouped(SimpleNamespace(moe_grouped=True, prefill_precision="split"), gw, uw, E, F)
    assert not MP.grouped(SimpleNamespace(moe_grouped=False, prefill_precision="fp16"), gw, uw, E, F)


class RouterNormStub:
    """A stand-in for kernel_check's CudaOps in the router norm cases: kernel_check.run_cases's switches (the
    router's launch, the int8 experts and the fused norm off), device arrays with their data.ptr, and a norm_moe
    that takes the fused launch exactly where CudaOps.norm_moe does (moe.norm_router) and only names its kernels."""

    moe_q8 = moe_router_fuse = moe_norm_fuse = False

    def __init__(self):
        self.scratch, self.fused = {}, []

    def load_weight(self, t):
        return FakeW(t)

    def _put(self, a):
        return np.array(a).view(DevArray)

    def zeros(self, shape):
        return np.zeros(shape, f32).view(DevArray)

    def _buf(self, key, n, dtype=f32, *, zeroed=False):
        a = self.scratch.get(key)
        if a is None or a.size < n or a.dtype != dtype:
            a = self.scratch[key] = np.zeros(max(n, 1), dtype).view(DevArray)
        return a[:n]

    def to_host(self, a):
        return np.array(a)

    def _k(self, file, name):  # (as CudaOps._k: through _k_with, which kernel_cases_q8.kernel_names watches)
        return self._k_with(file, name, ())

    def _k_with(self, file, name, extra):
        return name

    def norm_moe(self, h, norm, eps, router, *experts, x, **kw):
        fused = M.norm_router(self, router, h, x, norm)
        self.fused.append(fused)
        for n in (["moe_router_norm<2>"] if fused else ["rmsnorm_reg<4,2>", "moe_router"]):
            self._k("moe.cu", n)


@pytest.mark.parametrize("q8", [True, False])
def test_router_norm_case_reaches_the_fused_launch_under_kernel_checks_switches(q8):
    """kernel_check turns the router's own launch off for every case that does not switch it on itself, and
    moe.norm_router needs it: at ad90405 the router norm cases did not, so the fused launch never ran and all 4
    were red on the H200. Under kernel_check's switches the case's fused run must take it, its other run not."""
    from bw24.engine.kernel_cases_q8 import moe_router_norm_case

    stub = RouterNormStub()
    res = moe_router_norm_case(Q.Q4_K, Q.Q4_K, 2, 4, 2, 256, 256, q8)("stub", None, stub, np.random.default_rng(5))
    assert stub.fused == [False, True] and res.ok, res.line()
    assert RouterNormStub.moe_router_fuse is False and stub.moe_router_fuse is False  # the case's switch undone


def test_router_norm_is_opt_in_refused_or_recorded(monkeypatch, helpers):
    """BW24_MOE_ROUTER_NORM: off by default (CudaOps.moe_norm_fuse), 1 on with perf rows saying moe_router_norm,
    any other value a clear error naming the variable; the planted canary's macro reaches moe.cu alone."""
    helpers.opt_in_switch(monkeypatch, "moe_norm_fuse", "moe_router_norm_env", "BW24_MOE_ROUTER_NORM", "moe_router_norm",
                          "planted_routernorm", "BW24_PLANTED_ROUTERNORM", "moe.cu", "norm.cu")
