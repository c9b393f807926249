"""Device discovery: importing bw24.runtime is silent without a GPU, and answers are typed."""

from __future__ import annotations

import subprocess
import sys

import bw24.runtime as rt
import pytest


def test_import_is_clean_and_has_gpu_answers():
    code = "import bw24.runtime as r; print(r.has_gpu()); print(r.describe())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Traceback" not in out.stderr
    first, second = out.stdout.splitlines()[:2]
    assert first in ("True", "False")
    if first == "False":
        assert second.startswith("no GPU: ") and len(second) > len("no GPU: ")


@pytest.mark.parametrize("cc,arch", [((9, 0), "90a"), ((12, 0), "120a"), ((8, 6), "86"), ((10, 0), "100")])
def test_arch_for_cc(cc, arch):
    assert rt.arch_for_cc(*cc) == arch


def test_require_gpu_raises_typed_error_without_gpu():
    if rt.has_gpu():
        rt.require_gpu()  # must not raise
        assert rt.device_info().sm_count > 0
    else:
        with pytest.raises(rt.NoGPUError, match="needs a CUDA GPU"):
            rt.require_gpu()
        with pytest.raises(rt.NoGPUError):
            rt.DeviceArena()
