"""Fill the kernel disk cache on a fresh GPU host before the chain's first stage, on every core at once.

A bare host compiles each kernel instance the first time a process asks for it, one NVRTC run after
another (~0.5 s each here): kernel-check took 5.8 of the 30 device minutes at e7b99ea. This compiles the
instances the engine launches (kernels.COMPILE_SET), each as its own module with the defines CudaOps gives
on sm_90+ (BW24_PDL), exactly as ops/cuda/kernels.get_kernel will ask for it (the same cache key), in a
process pool. Instances outside the set still compile on first use.

    python warm_kernels.py [ARCH]      (ARCH: the device's, e.g. 90a; default: read from the GPU)
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor


def jobs(pdl: bool = True) -> list[tuple[str, tuple[str, ...], dict]]:
    """(kernel file, name expressions, defines) per module get_kernel loads: one template instance each, and
    each file's plain extern "C" kernels (attn_combine, moe_route, x_to_half, ...) as one module."""
    from bw24.engine.ops.cuda.kernels import COMPILE_SET

    defines = {"BW24_PDL": 1} if pdl else {}
    out = []
    for f, names in COMPILE_SET.items():
        out += [(f, (n,), defines) for n in names] + [(f, (), defines)]
    return out


def _compile(job, arch: str) -> str:
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin

    f, names, defines = job
    return compile_cubin(KERNEL_DIR / f, arch, defines, names).key


def main(arch: str | None = None) -> int:
    if arch is None:
        from bw24.runtime import device_info

        d = device_info()
        arch, pdl = d.arch, d.cc >= (9, 0)
    else:
        pdl = int(arch[:2]) >= 9
    todo = jobs(pdl)
    t = time.perf_counter()
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        keys = list(pool.map(_compile, todo, [arch] * len(todo)))
    print(f"warm: {len(keys)} modules for sm_{arch}{' with BW24_PDL' if pdl else ''} in "
          f"{time.perf_counter() - t:.1f} s on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
