"""Where the .cu files live, which template instances each op uses, and loading them on the GPU.

`COMPILE_SET` lists, per kernel file, the template instances the engine launches for the real
models and synthetic presets; the compile-only stage (no GPU) and the CI test build exactly these.
"""

from __future__ import annotations

import functools
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parents[2] / "kernels"
QMV_NT = (1, 4, 16)   # token-count buckets of the decode/verify matvec (T <= 16)
# (W warps, R rows) of the decode matvec that CI compiles: the built-in defaults at the presets' K
# and the H200 table's choices; other configs compile at run time on first use.
QMV_CONFIGS = ((4, 8), (1, 4), (4, 4), (4, 16), (2, 4), (1, 2))
ATTN_SHAPES = ((64, 64, 3), (64, 64, 7), (128, 128, 4), (128, 128, 8), (256, 256, 4), (128, 128, 2))

COMPILE_SET: dict[str, tuple[str, ...]] = {
    "qmatvec.cu": tuple(f"qmv<{f},{w},{r},1>" for f in (3, 4, 7, 9) for w, r in QMV_CONFIGS[:4])
    + tuple(f"qmv<{f},{w},2,1>" for f in (0, 1, 2, 5, 6, 8) for w in (1, 4))
    + tuple(f"qmv<{f},4,1,{nt}>" for f in (3, 7, 9) for nt in QMV_NT[1:])
    + ("qmv3<7,7,7,4,8,1>", "qmv3<7,7,9,4,8,1>", "qmv3<3,3,3,4,8,1>", "qmv3<4,4,4,4,8,1>", "qmv3<7,7,7,1,4,1>")
    + tuple(f"dequant_rows<{f}>" for f in range(10)),
    "attention.cu": tuple(f"attn_split<{d},{dv},{g}>" for d, dv, g in ATTN_SHAPES),
    "norm.cu": (),
    "rope.cu": (),
    "elementwise.cu": (),
    "sample.cu": (),
    "moe.cu": tuple(f"moe_mv<{f}>" for f in range(10)),  # expert matvec per weight format
}


def kernel_files() -> list[Path]:
    return sorted(KERNEL_DIR.glob("*.cu"))


@functools.cache
def get_kernel(file: str, name: str, defines: tuple[tuple[str, object], ...] = ()):
    """A launchable cupy RawKernel for `name` (a plain extern "C" name or a template instance) of
    kernels/<file>, compiled for this GPU (cached in memory and on disk). Needs a GPU."""
    from bw24.runtime import load_module

    ne = (name,) if "<" in name else ()
    return load_module(KERNEL_DIR / file, defines=dict(defines), name_expressions=ne).get(name)
