"""CI (no GPU): every kernel file compiles through NVRTC for sm_90a (Hopper) and sm_120a (consumer
Blackwell) with every template instance the engine launches, and kernel_check's no-GPU path says
that the GPU stages did not run."""

from __future__ import annotations

import re

import pytest
from bw24.engine.kernel_check import main as kernel_check_main
from bw24.engine.ops.cuda.kernels import COMPILE_SET, KERNEL_DIR, kernel_files
from bw24.runtime import compile_cubin, has_gpu


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    d = tmp_path_factory.mktemp("kcache")
    mp.setenv("BW24_KERNEL_CACHE", str(d))  # a fresh cache: NVRTC really runs in this test
    yield d
    mp.undo()


def test_every_kernel_file_is_in_the_compile_set():
    assert {f.name for f in kernel_files()} == set(COMPILE_SET)


@pytest.mark.parametrize("arch", ["90a", "120a"])
@pytest.mark.parametrize("name", sorted(COMPILE_SET))
def test_kernel_file_compiles(cache, name, arch):
    ck = compile_cubin(KERNEL_DIR / name, arch, name_expressions=COMPILE_SET[name])
    assert ck.cubin[:4] == b"\x7fELF"
    assert set(ck.lowered) == set(COMPILE_SET[name])
    assert all(sym.startswith("_Z") for sym in ck.lowered.values())
    assert (cache / f"{ck.key}.cubin").is_file()


@pytest.mark.parametrize("f", kernel_files(), ids=lambda p: p.name)
def test_kernel_file_opens_with_its_formula_mapping_and_bytes(f):
    head = f.read_text().split("#include")[0]
    assert all(re.search(w, head, re.I) for w in ("formula", "thread-to-data", "bytes"))


def test_kernel_check_without_gpu_runs_compile_only(cache):
    if has_gpu():
        pytest.skip("a GPU is present: kernel_check runs its GPU stages (tests/test_cuda_gpu.py)")
    lines: list[str] = []
    rc = kernel_check_main(seed=5, out=lines.append)
    assert rc == 0
    assert lines[0].startswith("kernel_check") and "seed=5" in lines[0]
    assert sum(" OK" in s and s.startswith("compile ") for s in lines) == 2 * len(COMPILE_SET)
    assert "GPU stages did not run" in lines[-1]
    assert all("ALL GREEN" not in s for s in lines)  # green is only claimed after the GPU stages


def test_broken_kernel_fails_the_compile_stage(cache, tmp_path, monkeypatch):
    """Canary: a kernel file that does not compile turns the compile-only stage red."""
    import bw24.engine.ops.cuda.kernels as K

    (tmp_path / "broken.cu").write_text('extern "C" __global__ void f(float* x) { x[0] = nope; }\n')
    monkeypatch.setattr(K, "kernel_files", lambda: [tmp_path / "broken.cu"])
    monkeypatch.setattr(K, "KERNEL_DIR", tmp_path)
    from bw24.engine import kernel_check

    lines: list[str] = []
    assert kernel_check.compile_stage(out=lines.append) is False
    assert any("FAIL" in s for s in lines)
