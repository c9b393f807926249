"""HBM read / write / copy with our 16-byte-load kernels, the driver's device-to-device copy as the
reference, L2 read bandwidth, and pinned host<->device copies.

Each HBM figure is the best median over a small launch-config sweep (threads, blocks per SM,
loads in flight), so the ceiling is the device's, not one config's.
"""

from __future__ import annotations

import itertools

import numpy as np

from .measure import GiB, gbs, random_u32, stream_buffer_bytes, time_events
from .rows import BenchContext, Row, kernel_path


def _module(unroll: int):
    from bw24.runtime import load_module

    return load_module(kernel_path("bandwidth.cu"), defines={"UNROLL": unroll})


def _configs(ctx: BenchContext):
    if ctx.quick:
        return [(4, 512, 4)]
    return list(itertools.product((2, 4, 8), (256, 512, 1024), (2, 4, 8)))  # unroll, threads, blocks/SM


def _best(ctx: BenchContext, make_launch, nbytes_moved: int) -> tuple[float, str]:
    """Sweep configs; return (best median GB/s, description of the winning config)."""
    best = (0.0, "")
    for unroll, threads, per_sm in _configs(ctx):
        if threads * per_sm > 2048:
            continue  # more resident threads than an SM holds: same as a smaller grid
        launch = make_launch(_module(unroll), ctx.sm_count * per_sm, threads)
        t = time_events(launch, ctx.stream, repeats=ctx.repeats)
        rate = gbs(nbytes_moved, t.median_ms)
        if rate > best[0]:
            best = (rate, f"unroll={unroll} threads={threads} blocks={per_sm}/SM spread={t.spread:.1%}")
    return best


def hbm(ctx: BenchContext) -> list[Row]:
    import cupy
    from cupy.cuda import runtime

    nbytes = stream_buffer_bytes(ctx.l2_bytes, ctx.free_bytes, want=(256 << 20) if ctx.quick else 2 * GiB)
    n16 = np.uint64(nbytes // 16)
    size = f"{nbytes / GiB:.2f} GiB buffers ({nbytes / ctx.l2_bytes:.0f}x L2)"
    sink = cupy.zeros(1, dtype=cupy.uint32)
    rows = []

    src = random_u32(nbytes // 4)
    rd, cfg = _best(ctx, lambda m, b, t: (lambda: m.get("read_u4")((b,), (t,), (src, n16, sink))),
                    nbytes)
    rows.append(Row("hbm_read_gbs", rd, "GB/s", "HBM read (16-byte loads)", f"{size}; {cfg}"))

    dst = random_u32(nbytes // 4)
    seed = np.uint32(0x5BD1E995)
    wr, cfg = _best(ctx, lambda m, b, t: (lambda: m.get("write_u4")((b,), (t,), (dst, n16, seed))),
                    nbytes)
    rows.append(Row("hbm_write_gbs", wr, "GB/s", "HBM write (16-byte stores)", f"{size}; {cfg}"))

    cp, cfg = _best(ctx, lambda m, b, t: (lambda: m.get("copy_u4")((b,), (t,), (src, dst, n16))),
                    2 * nbytes)
    rows.append(Row("hbm_copy_gbs", cp, "GB/s", "HBM copy, ours (read+write bytes)", f"{size}; {cfg}"))

    def d2d():
        runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, runtime.memcpyDeviceToDevice, ctx.stream.ptr)

    t = time_events(d2d, ctx.stream, repeats=ctx.repeats)
    ref = gbs(2 * nbytes, t.median_ms)
    rows.append(Row("d2d_copy_gbs", ref, "GB/s", "device-to-device copy, cudaMemcpy (read+write)",
                    f"{size}; reference; spread={t.spread:.1%}"))
    rows.append(Row("read_vs_d2d_pct", 100.0 * rd / ref, "%", "HBM read / d2d copy", "target: within 10%"))
    return rows


def l2(ctx: BenchContext) -> list[Row]:
    import cupy

    nbytes = max(ctx.l2_bytes // 4, 1 << 20)  # fits in L2 with room (H100/H200 split L2 in two halves)
    nbytes -= nbytes % (1 << 16)
    src = random_u32(nbytes // 4)
    sink = cupy.zeros(1, dtype=cupy.uint32)
    passes = np.int32(max(1, (256 << 20 if ctx.quick else 4 * GiB) // nbytes))
    n16 = np.uint64(nbytes // 16)
    rate, cfg = _best(ctx, lambda m, b, t: (lambda: m.get("read_l2")((b,), (t,), (src, n16, passes, sink))),
                      nbytes * int(passes))
    return [Row("l2_read_gbs", rate, "GB/s", "L2 read (ld.global.cg, L1 bypassed)",
                f"{nbytes / 2**20:.0f} MiB buffer x {int(passes)} passes; {cfg}")]


def pinned(ctx: BenchContext) -> list[Row]:
    from bw24.runtime import pinned_empty
    from cupy.cuda import runtime

    nbytes = (64 << 20) if ctx.quick else (512 << 20)
    host = pinned_empty((nbytes // 4,), np.uint32)
    host[:] = np.random.default_rng().integers(1, 2**32 - 1, size=host.shape, dtype=np.uint32)
    dev = random_u32(nbytes // 4)
    rows = []
    for metric, label, kind, d, s in (
        ("h2d_pinned_gbs", "host->device, pinned", runtime.memcpyHostToDevice, dev.data.ptr, host.ctypes.data),
        ("d2h_pinned_gbs", "device->host, pinned", runtime.memcpyDeviceToHost, host.ctypes.data, dev.data.ptr),
    ):
        def copy(d=d, s=s, kind=kind):
            runtime.memcpyAsync(d, s, nbytes, kind, ctx.stream.ptr)

        t = time_events(copy, ctx.stream, repeats=max(5, ctx.repeats // 2))
        rows.append(Row(metric, gbs(nbytes, t.median_ms), "GB/s", label,
                        f"{nbytes >> 20} MiB, cudaMemcpyAsync; spread={t.spread:.1%}"))
    return rows
