"""CPU: the VRAM plan counts the repacked planes exactly, and a plan larger than free memory is a
clear typed error (the GPU test proves it fires before any upload)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bw24.engine.ops.cuda import memory
from bw24.engine.ops.cuda.repack import SUPPORTED, random_raw, repack


@pytest.mark.parametrize("qt", SUPPORTED, ids=lambda q: q.name)
def test_plane_bits_match_the_repacked_bytes(qt):
    n, k = 7, 512
    p = repack(random_raw(qt, n, k, np.random.default_rng(0)), qt, (n, k))
    assert p.nbytes == math.ceil(n * k * memory.PLANE_BITS[qt] / 8)


@pytest.fixture(scope="module")
def synth_path(tmp_path_factory):
    from bw24.gguf.synth import synth

    path = tmp_path_factory.mktemp("mem") / "qwen3moe-tiny.gguf"
    synth("qwen3moe-tiny", path, mix="q4_k_m", seed=1)
    return path


def test_plan_and_fit(synth_path):
    from bw24.gguf import GGUFFile, ModelConfig

    f = GGUFFile(synth_path)
    cfg = ModelConfig.from_gguf(f)
    p = memory.plan(f, cfg, n_ctx=256, max_batch=16)
    assert 0.9 * p.gguf_tensors < p.weights < 1.5 * p.gguf_tensors  # planes ~ GGUF bytes (+ f32 vectors)
    assert p.kv == 4 * cfg.n_layer * 256 * cfg.n_head_kv * (cfg.head_dim + cfg.head_dim_v)
    # the logits' rows are the buffers' logit_rows, not the chunk's: a longer chunk adds activations only
    few = memory.plan(f, cfg, n_ctx=256, max_batch=16, logit_rows=4)
    assert p.activations - few.activations == 4 * 12 * cfg.n_vocab
    long, long_all = (memory.plan(f, cfg, n_ctx=256, max_batch=64, logit_rows=r) for r in (4, None))
    assert (long_all.activations - p.activations) - (long.activations - few.activations) == 4 * 48 * cfg.n_vocab
    memory.check_fit(p, "m", free=p.total)  # exactly enough: fine
    with pytest.raises(memory.ModelDoesNotFitError, match=r"m does not fit in GPU memory: needs .* GiB"):
        memory.check_fit(p, "m", free=p.total - 1)


def _scratch_ops():
    """A CudaOps with a fake CuPy (NumPy arrays; the pool's free_all_blocks calls recorded in `released`): its
    scratch logic without a GPU."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from bw24.engine.ops.cuda.backend import CudaOps

    released = []
    pool = SimpleNamespace(free_all_blocks=lambda: released.append(1))
    ops = CudaOps.__new__(CudaOps)
    ops.cp = SimpleNamespace(empty=lambda n, dtype: np.empty(n, dtype), zeros=lambda n, dtype: np.zeros(n, dtype),
                             get_default_memory_pool=lambda: pool)
    ops.stream, ops._scratch, ops._scratch_gen, ops._capturing = nullcontext(), {}, 0, False
    ops._scratch_outer, ops.scratch_peak, ops._rope_tabs = [], 0, {}
    return ops, released


def test_scratch_growth_hands_the_pool_back():
    """CudaOps._buf: a scratch that grows returns CuPy's cached free blocks (the smaller array it replaced)
    to the driver; a first allocation or a fitting request does not, nor does growth inside a graph capture
    (cudaFree is not capturable). Fake CuPy: no GPU needed."""
    ops, released = _scratch_ops()
    assert ops._buf("y", 10).size == 10 and released == []  # first allocation
    assert ops._buf("y", 8).size == 8 and released == [] and ops._scratch_gen == 1  # fits
    assert ops._buf("y", 20).size == 20 and released == [1] and ops._scratch_gen == 2  # grown: released
    ops._capturing = True
    assert ops._buf("y", 30).size == 30 and released == [1]  # inside a capture: kept


def test_the_gates_exact_half_drops_its_own_scratch(monkeypatch):
    """CudaOps.exact_activations (the gate's exact half): its scratch is its own and is dropped when the block
    ends (as the gate's float32 cache is), so the split GEMMs' low halves and the host-planned experts' rows are
    not held through generation (the 30B-A3B's long gate: 0.81 GiB of scratch at fb470bb, over the bound); the
    scratch peak counts both while the block lives, and the report names it. Fake CuPy: no GPU needed."""
    from types import SimpleNamespace

    ops, released = _scratch_ops()
    ops.qmv_configs, ops.prefill_precision, ops.prefill_graphs = SimpleNamespace(force_path=None), "fp16", True
    ops._buf("gemm_wh", 1000)  # the rounded paths' (4,000 bytes)
    with ops.exact_activations():
        assert ops._buf("gemm_wh", 10).size == 10 and ops._buf("gemm_wl", 3000).size == 3000
        assert set(ops._scratch) == {"gemm_wh", "gemm_wl"}
    assert set(ops._scratch) == {"gemm_wh"} and ops._scratch["gemm_wh"].size == 1000 and released == [1]
    assert ops.scratch_peak == 4 * (1000 + 10 + 3000)
    g = 2**30
    p = memory.MemoryPlan(weights=10 * g, gguf_tensors=9 * g, kv=g, activations=0, scratch=0)
    monkeypatch.setattr(memory, "used_bytes", lambda: 10 * g)
    line = memory.report(p, 10 * g, 0, {"gemm_wh": 4000}, ops.scratch_peak)
    assert "; scratch 0.000 GiB, largest gemm_wh 0.000; scratch peak 0.000 GiB; planned" in line
    assert "scratch peak" not in memory.report(p, 10 * g, 0, {"gemm_wh": 4000}, 4000)  # peak = held: not said


def test_the_gates_exact_half_builds_its_own_rope_tables_and_leaves_the_outer_ones_built():
    """The rope tables (norm.rope_table) live in the scratch, and CudaOps._rope_tabs records the positions built
    in them: exact_activations swaps the record with the scratch. A table built before the block is built again
    inside it, into the block's own array (at aee9d2f the block saw it marked built, took a fresh uninitialized
    array and never built it: NaN on the H200); after the block the outer table is used as it was, unbuilt again,
    and a table first built inside the block is built again outside. Fake CuPy: no GPU needed."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda import norm

    ops, _ = _scratch_ops()
    ops.qmv_configs, ops.prefill_precision, ops.prefill_graphs = SimpleNamespace(force_path=None), "fp16", True
    built: list[tuple[int, int]] = []  # (the table's array, positions) of each build launch
    ops._k = lambda f, n: n
    ops._launch = lambda fn, grid, block, args: built.append((id(ops._scratch[next(iter(
        k for k in ops._scratch if k.startswith("rope_tab:")))]), int(args[1])))
    outer = norm.rope_table(ops, 1e6, 1.0, 128, 64)
    assert len(built) == 1 and built[0][1] == 64
    with ops.exact_activations():
        inner = norm.rope_table(ops, 1e6, 1.0, 128, 64)
        assert len(built) == 2 and built[1] == (id(ops._scratch["rope_tab:1000000.0:1.0:128"]), 64)
        assert inner.base is not outer.base
    again = norm.rope_table(ops, 1e6, 1.0, 128, 64)
    assert len(built) == 2 and again.base is outer.base  # the outer table, as built before the block
    ops2, _ = _scratch_ops()
    ops2.qmv_configs, ops2.prefill_precision, ops2.prefill_graphs = SimpleNamespace(force_path=None), "fp16", True
    n2: list[int] = []
    ops2._k, ops2._launch = (lambda f, n: n), (lambda fn, grid, block, args: n2.append(int(args[1])))
    with ops2.exact_activations():
        norm.rope_table(ops2, 1e4, 1.0, 64, 32)
    norm.rope_table(ops2, 1e4, 1.0, 64, 32)
    assert n2 == [32, 32]  # first built inside the block, then again for the outer scratch


@pytest.mark.parametrize("value", [None, "1", "0"])
def test_moe_paths_default_on_and_env_zero_turns_them_off(value, helpers):
    """BW24_MOE_Q8, BW24_MOE_ROUTER and BW24_MOE_GROUPED are on unless set to 0 (the defaults since the pinned
    gate MATCHed them at 2c3a1bc), read in a fresh interpreter as a user's process reads them."""
    env = {} if value is None else dict(BW24_MOE_Q8=value, BW24_MOE_ROUTER=value, BW24_MOE_GROUPED=value)
    out = helpers.fresh_python("from bw24.engine.ops.cuda.backend import CudaOps as C; "
                               "print(C.moe_q8, C.moe_router_fuse, C.moe_grouped, C.moe_q8_attn)", "BW24_MOE_", **env)
    on = value != "0"
    assert out.split() == [str(on), str(on), str(on), "False"]


def test_moe_activation_policy():
    """A mixture-of-experts model's matvecs on int8 activations, its experts too (BW24_MOE_Q8, moe_q8, the
    default since 2c3a1bc; not in the gate's exact half). With BW24_MOE_Q8=0 they take fp32 activations but
    the vocabulary head, and BW24_MOE_Q8_ATTN (moe_q8_attn) leaves the attention projections on the q8 path;
    perf rows say which ("no_moe_q8", "moe_q8_attn"). A dense model is never touched."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.launch import QmvConfigs
    from bw24.engine.ops.cuda.moe import q8_experts
    from gguf.constants import GGMLQuantizationType as Q

    experts = [SimpleNamespace(fmt=7), SimpleNamespace(fmt=7), SimpleNamespace(fmt=9)]  # Q4_K / Q4_K / Q6_K

    def policy(moe: bool, q8_attn: bool, q8: bool = False):
        ops = CudaOps.__new__(CudaOps)
        ops.qmv_configs, ops.moe_q8_attn, ops.moe_q8 = QmvConfigs(), q8_attn, q8
        ops._activation_policy(SimpleNamespace(is_moe=moe))
        # the 30B-A3B's fused Q/K/V (5120 x 2048) and its vocabulary head (151936 x 2048)
        return (ops.quantizes_activations, ops.qmv_configs.plan(Q.Q4_K, 5120, 2048)[0],
                ops.qmv_configs.plan(Q.Q6_K, 151936, 2048)[0], "moe_q8_attn" in ops.opt_in(),
                "no_moe_q8" in ops.opt_in(), q8_experts(ops, *experts))

    assert policy(True, False) == (False, "f32", "q8", False, True, False)
    assert policy(True, True) == (True, "q8", "q8", True, True, False)
    assert policy(True, False, True) == (True, "q8", "q8", False, False, True)
    assert policy(False, False) == (True, "q8", "q8", False, True, False)
    ops = CudaOps.__new__(CudaOps)
    ops.qmv_configs, ops.moe_q8_attn, ops.moe_q8 = QmvConfigs(), False, True
    ops._activation_policy(SimpleNamespace(is_moe=True))
    ops.qmv_configs.force_path = "f32"  # the gate's exact half (exact_activations): the fp32 experts
    assert not q8_experts(ops, *experts)
    ops.qmv_configs.force_path = None
    assert not q8_experts(ops, SimpleNamespace(fmt=1), SimpleNamespace(fmt=1), experts[2])  # F16: no int8 kernel
    assert not q8_experts(ops, experts[0], SimpleNamespace(fmt=8), experts[2])  # gate / up differ: the fallback


def test_the_report_names_the_bound_and_the_largest_scratch(monkeypatch):
    """memory.report: VRAM held against gguf + KV + 1 GiB, OK or EXCEEDED, and where scratch is given its total and
    largest keys (so a run over the bound, as the 30B-A3B's long gate, says what holds the memory)."""
    g = 2**30
    p = memory.MemoryPlan(weights=10 * g, gguf_tensors=9 * g, kv=g, activations=g // 2, scratch=g // 4)
    monkeypatch.setattr(memory, "used_bytes", lambda: 11 * g + g // 2)
    line = memory.report(p, 10 * g, 0, {"a": g // 4, "b": g // 2, "c": 1 << 20, "d": 2 << 20, "e": 0})
    assert line.startswith("VRAM used 11.500 GiB (weights 10.000 GiB, KV 1.000 GiB; scratch 0.753 GiB, largest "
                           "b 0.500, a 0.250, d 0.002, c 0.001;") and line.endswith("= 11.000 GiB EXCEEDED)")
    monkeypatch.setattr(memory, "used_bytes", lambda: 11 * g)
    assert memory.report(p, 10 * g, 0).endswith("bound gguf+KV+1GiB = 11.000 GiB OK)")  # (no scratch: no list)
