"""Compile cache without a GPU: NVRTC -> cubin for sm_90a / sm_120a, keys that move with the sources."""

from __future__ import annotations

import pytest
from bw24.runtime import KernelCompileError, KernelSourceError, cache_key, compile_cubin, source_closure

KERNEL = """
#include "helpers.cuh"
extern "C" __global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = plus(x[i], SCALE);
}
template <int N> __global__ void times(float* x) { x[threadIdx.x] *= N; }
"""


@pytest.fixture()
def kdir(tmp_path, monkeypatch):
    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "helpers.cuh").write_text("__device__ inline float plus(float a, float b) { return a + b; }\n")
    (tmp_path / "k.cu").write_text(KERNEL)
    return tmp_path


@pytest.mark.parametrize("arch", ["90a", "120a", "86"])
def test_compiles_to_cubin_without_gpu(kdir, arch):
    ck = compile_cubin(kdir / "k.cu", arch, defines={"SCALE": "1.0f"}, name_expressions=("times<3>",))
    assert ck.cubin[:4] == b"\x7fELF"          # a cubin is an ELF image
    assert ck.lowered["times<3>"].startswith("_Z")  # the template got a mangled symbol
    assert (kdir / "cache" / f"{ck.key}.cubin").is_file()


def test_cache_key_covers_includes_defines_and_arch(kdir):
    k0 = cache_key(kdir / "k.cu", "90a", {"SCALE": "1.0f"})
    assert cache_key(kdir / "k.cu", "120a", {"SCALE": "1.0f"}) != k0
    assert cache_key(kdir / "k.cu", "90a", {"SCALE": "2.0f"}) != k0
    (kdir / "helpers.cuh").write_text("__device__ inline float plus(float a, float b) { return a - b; }\n")
    assert cache_key(kdir / "k.cu", "90a", {"SCALE": "1.0f"}) != k0


def test_source_closure_finds_includes(kdir):
    assert {p.name for p in source_closure(kdir / "k.cu")} == {"k.cu", "helpers.cuh"}


def test_broken_source_raises_typed_error_with_log(kdir):
    (kdir / "bad.cu").write_text('extern "C" __global__ void f(float* x) { x[0] = undefined_name; }\n')
    with pytest.raises(KernelCompileError, match="undefined_name"):
        compile_cubin(kdir / "bad.cu", "90a", use_disk_cache=False)


def test_missing_include_raises_source_error(kdir):
    (kdir / "inc.cu").write_text('#include "nope.cuh"\n')
    with pytest.raises(KernelSourceError, match="nope.cuh"):
        compile_cubin(kdir / "inc.cu", "90a")
