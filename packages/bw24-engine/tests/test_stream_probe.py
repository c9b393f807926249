"""benchmarks/gpu_stream_probe.py and stream_probe.cu (the attention cache's bytes streamed alone, in pass 1's shapes):
its configs tile the region exactly and fit a block's shared memory, the kernels compile for sm_90a, and a config that
does not tile the region, or asks too much shared memory or part of a warp, is refused (the canaries of that check)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("gpu_stream_probe", BENCH / "gpu_stream_probe.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its frozen dataclass resolves its annotations through the module)
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


def test_configs_tile_the_attention_cache_and_name_pass_1s_shape(probe):
    probe.check_configs()
    assert probe.REGION == 8 * 4096 * 2 * 128 * 2  # the 8B's K and V at 4,096 keys, float16
    first = probe.CONFIGS[0]
    # pass 1 at 33 splits: blocks of 4 warps, two 32 KB tiles (64 keys of K and of V, 128 halves each) at once
    assert (first.kernel, first.threads, first.tiles, first.tile_kb, first.blocks) == ("stream_all", 128, 2, 32, 256)
    assert first.smem == 64 * 1024
    ring = next(c for c in probe.CONFIGS if c.kernel == "stream_ring2")
    assert ring.smem == 2 * ring.tile_kb * 1024 and ring.tiles > 2
    assert {c.kernel for c in probe.CONFIGS} == {"stream_all", "stream_ring2", "stream_ldg", "stream_empty"}
    assert len({c.name for c in probe.CONFIGS}) == len(probe.CONFIGS)
    # 2 x 160 MiB of copies: every launch's region comes from HBM on a GPU of up to 80 MiB of L2
    assert probe.COPIES * probe.REGION >= 2 * 80 * 2**20


def test_a_config_that_does_not_tile_the_region_is_refused(probe):
    bad = probe.Config("3 tiles", "stream_all", 128, 3, 32)  # 16 MiB is not a multiple of 96 KB
    with pytest.raises(ValueError, match="does not tile"):
        probe.check_configs((bad,))
    with pytest.raises(ValueError, match="262144 bytes of shared memory"):
        probe.check_configs((probe.Config("too much shared memory", "stream_all", 128, 8, 32),))
    with pytest.raises(ValueError, match="100 threads"):
        probe.check_configs((probe.Config("part of a warp", "stream_ldg", 100, 1, 32),))


def test_the_kernels_compile_for_sm90(tmp_path, monkeypatch):
    from bw24.runtime import compile_cubin

    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    ck = compile_cubin(BENCH / "stream_probe.cu", "90a")
    assert ck.cubin[:4] == b"\x7fELF"
    for name in (b"stream_all", b"stream_ring2", b"stream_ldg", b"stream_empty"):
        assert name in ck.cubin
