"""The probe's .cu files compile for Hopper and consumer Blackwell without a GPU (NVRTC only)."""

from __future__ import annotations

import pytest
from bw24.probe.rows import kernel_path
from bw24.runtime import KernelCompileError, compile_cubin

KERNELS = {"bandwidth.cu": ("read_u4", "write_u4", "copy_u4", "read_l2", "noop"), "mma.cu": ("mma_f16", "mma_s8")}


@pytest.mark.parametrize("arch", ["90a", "120a"])
@pytest.mark.parametrize("fname", sorted(KERNELS))
def test_probe_kernels_compile(fname, arch):
    ck = compile_cubin(kernel_path(fname), arch, use_disk_cache=False)
    for name in KERNELS[fname]:
        assert name.encode() in ck.cubin, f"{name} missing from {fname} sm_{arch}"


def test_mma_needs_sm80(tmp_path):
    """Canary: the int8/fp16 mma.sync shapes do not exist before sm_80, so NVRTC must refuse them."""
    with pytest.raises(KernelCompileError, match="mma.cu"):
        compile_cubin(kernel_path("mma.cu"), "75", use_disk_cache=False)
