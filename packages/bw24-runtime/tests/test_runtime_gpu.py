"""Arena, pinned staging, graph capture/replay on a real GPU (skipped, saying so, without one)."""

from __future__ import annotations

import bw24.runtime as rt
import numpy as np
import pytest

if not rt.has_gpu():
    pytest.skip(f"no CUDA GPU: {rt.no_gpu_reason()}", allow_module_level=True)

import cupy as cp  # noqa: E402

KERNEL = 'extern "C" __global__ void inc(int* c, float* x) { x[c[0]] += 1.0f; if (threadIdx.x == 0) c[0] += 1; }\n'


def test_arena_upload_roundtrip_through_small_staging():
    a = rt.DeviceArena(staging_bytes=4096)
    host = np.random.default_rng(1).standard_normal(10_001).astype(np.float32)
    dev = a.upload("w", host)
    np.testing.assert_array_equal(cp.asnumpy(dev), host)
    with pytest.raises(rt.ArenaError):
        a.alloc("w", (4,), np.float32)


def test_graph_replay_advances_device_counter(tmp_path):
    (tmp_path / "inc.cu").write_text(KERNEL)
    fn = rt.load_module(tmp_path / "inc.cu").get("inc")
    s = rt.new_stream()
    with s:
        c = cp.zeros(1, cp.int32)
        x = cp.zeros(8, cp.float32)
    g = rt.CapturedGraph(s).capture(lambda: fn((1,), (1,), (c, x)))
    g.replay(5)
    s.synchronize()
    assert int(c[0]) == 5
    np.testing.assert_array_equal(cp.asnumpy(x), [1, 1, 1, 1, 1, 0, 0, 0])
