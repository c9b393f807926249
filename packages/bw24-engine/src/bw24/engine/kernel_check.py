"""kernel_check: every cuda op against its NumPy reference twin, on fresh random inputs.

Without a GPU only the compile-only stage runs (every .cu for sm_90a and sm_120a) and the report
says the GPU stages did not run. The printed lines are part of the interface (ARCHITECTURE.md).

Tolerances, per op class, on rel = ||cuda - ref||_2 / ||ref||_2 (and maxdiff = max |cuda - ref|):
| class     | ops                                  | rel tol | why                                        |
| exact     | embed, sample (greedy and seeded draws), rng, advance | 0 | same formula / integer result  |
| elementw  | glu, rmsnorm, rope_kv                | 1e-6    | fp32 math, libm ulps (expf, tanhf, rsqrtf) |
| matmul    | matmul (matvec T<=16, GEMM T>16), logits, moe | 2e-5 | fp32 accumulation in another order   |
|           |   (prefill GEMM "split": fp16 hi+lo halves of W and x, ~6e-8 CPU-emulated; ops/cuda/prefill.py) |
| gemm16    | prefill GEMM, precision "fp16"       | 2e-3    | W and x rounded to fp16 (u = 2^-11): 2-3e-4  |
|           |   CPU-emulated on kernel_check's random weights of every quant type; a dropped group ~1e-1 |
| attention | attention (split-K / prefill flash, online softmax) | 1e-5 | fp32 softmax vs float64 ref |
| matmul_q8 | matmul/matmul_multi on the q8 path (int8 x, dp4a) | 2e-5 | vs the fp64 product of the dequantized |
|           | weight and the activation quantized exactly as quantize_x does (bit-exact twin, q8.py): only |
|           | fp32 rounding of per-group scale products and sums remains; quantize_x itself is "exact" |
Seen on an H200 (evidence/kernel_check_h200.log): rel <= 4e-7 (matmul, attention), <= 4e-8 (elementw),
so each tolerance leaves a margin of 25x or more while a planted off-by-one lands near 1e-1.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

TOL = {"exact": 0.0, "elementw": 1e-6, "matmul": 2e-5, "attention": 1e-5, "matmul_q8": 2e-5, "gemm16": 2e-3}
GREEN = "ALL GREEN: kernels match CPU reference."


@dataclass(frozen=True)
class FakeTensor:
    """Duck-typed bw24.gguf TensorInfo for random weights."""

    name: str
    raw: np.ndarray
    qtype: object
    shape: tuple[int, ...]

    def dequantize(self) -> np.ndarray:
        from bw24.gguf import dequantize

        return dequantize(self.raw, self.qtype, self.shape)


@dataclass
class Result:
    case: str
    cls: str
    maxdiff: float
    rel: float

    @property
    def ok(self) -> bool:
        return bool(np.isfinite(self.rel)) and self.rel <= TOL[self.cls]

    def line(self) -> str:
        return (f"{self.case:<52} maxdiff={self.maxdiff:.3e} rel={self.rel:.3e} tol={TOL[self.cls]:.0e} "
                f"{'OK' if self.ok else 'FAIL'}")


@contextmanager
def setting(obj, name: str, value) -> Iterator[None]:
    """obj.<name> = value while a case runs (an opt-in path, a workbench override), then as it was."""
    old = getattr(obj, name, None)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def with_setting(attr: str, doc: str, value=True):
    """A wrapper running a case with cu.<attr> = value (on: an opt-in path) through setting()."""
    def wrap(case):
        def run(name, ref, cu, rng):
            with setting(cu, attr, value):
                return case(name, ref, cu, rng)
        return run
    wrap.__doc__ = doc
    return wrap


def compare(case: str, cls: str, got: np.ndarray, ref: np.ndarray) -> Result:
    """An infinity counts only where the reference has the very same one (FR-Spec's expand writes -inf
    at every dropped id, on purpose); anywhere else it makes the case red, as does any other difference."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        return Result(case, cls, float("inf"), float("inf"))
    odd = ~np.isfinite(ref)
    if not np.array_equal(~np.isfinite(got), odd) or not np.array_equal(got[odd], ref[odd]):
        return Result(case, cls, float("inf"), float("inf"))
    got, ref = np.where(odd, 0.0, got), np.where(odd, 0.0, ref)
    d = got - ref
    md = float(np.max(np.abs(d))) if d.size else 0.0
    nr = float(np.linalg.norm(ref))
    rel = float(np.linalg.norm(d)) / nr if nr > 0 else md
    return Result(case, cls, md, rel)


# ---- compile-only stage ------------------------------------------------------------------------
def compile_stage(archs=("90a", "120a"), out=print) -> bool:
    from bw24.runtime import KernelCompileError, compile_cubin

    from .ops.cuda.kernels import COMPILE_SET, KERNEL_DIR, kernel_files

    ok = True
    for f in kernel_files():
        names = COMPILE_SET.get(f.name, ())
        for arch in archs:
            t = time.perf_counter()
            try:
                compile_cubin(KERNEL_DIR / f.name, arch, name_expressions=names)
                out(f"compile {f.name:<16} sm_{arch:<5} {max(len(names), 1):3d} kernels "
                    f"{time.perf_counter() - t:6.2f} s  OK")
            except KernelCompileError as e:
                ok = False
                out(f"compile {f.name:<16} sm_{arch:<5} FAIL\n{e}")
    return ok


# ---- GPU stage ---------------------------------------------------------------------------------
def run_cases(seed: int, variant: str = "", out=print, only: str | None = None) -> list[Result]:
    from .kernel_cases import cases
    from .ops.cuda import CudaOps
    from .ops.ref import RefOps

    ref, cu = RefOps(), CudaOps(variant=variant)
    # Each MoE case names its path and switches it on itself (setting / opted: "moe decode q8", "moe router
    # fused", "moe grouped"); the rest hold the fp32 experts, the router matvec + moe_route and the host-planned
    # prefill to the fp32 reference, whatever the backend's defaults (all three on since 2c3a1bc).
    cu.moe_q8 = cu.moe_router_fuse = cu.moe_grouped = False
    # The decode attention's cases hold the ch-key split rule (their fill, min-blocks and combine canaries need rows
    # of several splits), the "attn short" ones setting BW24_ATTN_SHORT themselves (attn_short_case), whatever the
    # backend's default (256 since 30ecafb's run).
    cu.attn_short = 0
    rng = np.random.default_rng(seed)
    results = []
    for name, fn in cases():
        if only and only not in name:
            continue
        ref._cache.clear()  # weights are cached by (name, data address); freed addresses recur across cases
        cu._cache.clear()
        try:
            r: Result = fn(name, ref, cu, rng)
        except Exception as e:  # noqa: BLE001 (a case that raises is red, and the rest still run)
            # Why: at 1aeef0e one case's launch failure (too many registers a block) ended the whole run 139
            # cases in, and the 392 cases after it were never checked. A sticky CUDA error turns the later cases
            # red too, which the log then shows case by case.
            first = (str(e).splitlines() or [""])[0][:120]  # the message's first line
            r = Result(f"{name} (raised {type(e).__name__}: {first})", "exact", float("inf"), float("inf"))
        out(r.line())
        results.append(r)
    return results


def main(seed: int | None = None, variant: str = "", out: Callable[[str], None] = print,
         only: str | None = None, compile_only: bool = False) -> int:
    from bw24.runtime import describe, has_gpu, no_gpu_reason

    seed = int.from_bytes(os.urandom(4), "little") if seed is None else int(seed)
    out(f"kernel_check  device: {describe()}  seed={seed}")
    if compile_only or not has_gpu():
        ok = compile_stage(out=out)
        if not has_gpu():
            out(f"GPU stages did not run (no CUDA GPU: {no_gpu_reason()}); compile-only stage "
                f"{'passed' if ok else 'FAILED'} for sm_90a and sm_120a.")
        return 0 if ok else 1
    results = run_cases(seed, variant, out, only)
    bad = [r for r in results if not r.ok]
    if bad or not results:
        out(f"FAIL: {len(bad)} of {len(results)} cases differ from the CPU reference (seed={seed}).")
        return 1
    out(f"{len(results)} cases OK (seed={seed}).")
    out(GREEN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
