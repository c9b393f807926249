"""cuBLAS GEMM rates: fp16 through cupy.matmul, bf16 through cublasGemmEx (CuPy has no bf16 dtype,
so bf16 operands are uint16 bit patterns handed to cuBLAS as CUDA_R_16BF). fp32 accumulate both.
"""

from __future__ import annotations

import numpy as np

from .measure import tflops, time_events
from .rows import BenchContext, Row

CUDA_R_16BF = 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1


def _size(ctx: BenchContext) -> int:
    return 2048 if ctx.quick else 8192


def fp16(ctx: BenchContext) -> list[Row]:
    import cupy

    n = _size(ctx)
    a = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
    b = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
    c = cupy.empty((n, n), dtype=cupy.float16)
    with ctx.stream:
        t = time_events(lambda: cupy.matmul(a, b, out=c), ctx.stream, repeats=ctx.repeats)
    return [Row("gemm_fp16_tflops", tflops(2.0 * n**3, t.median_ms), "TFLOP/s", "cuBLAS GEMM fp16 (cupy.matmul)",
                f"{n}x{n}x{n}, random normal data; spread={t.spread:.1%}")]


def _bf16_bits(x):
    """float32 -> bf16 bit pattern (round to nearest even), as uint16."""
    import cupy

    u = x.view(cupy.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(cupy.uint16)


def bf16(ctx: BenchContext) -> list[Row]:
    import cupy
    from cupy_backends.cuda.libs import cublas

    n = _size(ctx)
    a = _bf16_bits(cupy.random.standard_normal((n, n), dtype=cupy.float32))
    b = _bf16_bits(cupy.random.standard_normal((n, n), dtype=cupy.float32))
    c = cupy.empty((n, n), dtype=cupy.uint16)
    alpha, beta = np.ones(1, np.float32), np.zeros(1, np.float32)
    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setStream(handle, ctx.stream.ptr)

    def gemm():
        cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n, n, n, alpha.ctypes.data,
                      a.data.ptr, CUDA_R_16BF, n, b.data.ptr, CUDA_R_16BF, n, beta.ctypes.data,
                      c.data.ptr, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)

    try:
        t = time_events(gemm, ctx.stream, repeats=ctx.repeats)
    finally:
        cublas.setStream(handle, cupy.cuda.get_current_stream().ptr)
    return [Row("gemm_bf16_tflops", tflops(2.0 * n**3, t.median_ms), "TFLOP/s", "cuBLAS GEMM bf16 (cublasGemmEx)",
                f"{n}x{n}x{n}, random normal data; spread={t.spread:.1%}")]
