"""BW24_L2_PREFETCH without a GPU: the prefetch ranges (ops/cuda/prefetch.py), rope_kv carrying the armed
table for decode / verify rows only, and the forward arming it before each decode layer's attention."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from bw24.engine.ops.cuda import prefetch
from bw24.engine.ops.cuda.norm import rope_kv
from bw24.engine.ops.cuda.weights import NULL


def test_ranges_take_groups_in_order_and_the_same_fraction_of_each_plane():
    wo = [(0x1000, 4096)]
    gate_up = [(0x10000, 8000), (0x20000, 2000), (0x30000, 8000), (0x40000, 2000)]
    r = prefetch.ranges([wo, gate_up], 4096 + 10000)  # wo whole, then half of each gate / up plane
    assert r.dtype == np.int64 and r.tolist() == [[0x1000, 4096], [0x10000, 4000], [0x20000, 992],
                                                  [0x30000, 4000], [0x40000, 992]]
    assert all(n % 16 == 0 for _, n in r) and r[:, 1].sum() <= 4096 + 10000
    # a budget below the first group: its prefix only; the next group gets what is left, here nothing
    assert prefetch.ranges([wo, gate_up], 1000).tolist() == [[0x1000, 992]]
    assert prefetch.ranges([wo, gate_up], 1 << 30)[:, 1].tolist() == [4096, 8000, 2000, 8000, 2000]
    assert prefetch.ranges([[], wo], 64).tolist() == [[0x1000, 64]]  # an empty group (MoE: no gate / up)
    assert prefetch.ranges([wo], 0).shape == (0, 2)


def test_ranges_refuse_an_unaligned_plane():
    with pytest.raises(ValueError, match="16-byte aligned"):
        prefetch.ranges([[(0x1008, 4096)]], 1 << 20)


def _cu(helpers, launches, pending):
    def launch(fn, grid, block, args, shared_mem=0):
        assert len(args) == len(helpers.kernel_params("rope.cu", "rope_kv"))
        launches.append((grid, args[-2], int(args[-1])))

    tab = np.zeros(64, np.float32).view(helpers.HostDev)
    return SimpleNamespace(_rope_tabs={"rope_tab:10000.0:1.0:8": 64}, _capturing=False, _l2_pending=pending,
                           _buf=lambda key, n, dtype=np.float32, zeroed=False: tab[:n],
                           _k=lambda f, n: (f, n), _launch=launch)


@pytest.mark.parametrize("T", [1, 5, 16, 17])
def test_rope_kv_carries_the_armed_table_once_and_for_decode_rows_only(helpers, T):
    launches, table = [], ("device-table", 7)
    cu = _cu(helpers, launches, table)
    z = np.zeros
    q, k, v = z((T, 4, 8), np.float32), z((T, 2, 8), np.float32), z((T, 2, 8), np.float32)
    kc, vc = z((2, 64, 8), np.float32), z((2, 64, 8), np.float32)
    for _ in range(2):
        rope_kv(cu, q, k, v, z(1, np.int32), kc, vc, base=10000.0, freq_scale=1.0, rope_dim=8, mode="neox")
    assert cu._l2_pending is None  # consumed by the first launch, whatever T
    first = ("device-table", 7) if T <= 16 else (NULL, 0)
    assert launches[0][1:] == first and launches[1][1:] == (NULL, 0)


class _ArmRecorder:
    """Ops stand-in recording prefetch_l2 / rope_attention in order (the forward's calls)."""

    def __init__(self):
        self.calls = []

    def prefetch_l2(self, groups):
        self.calls.append(("prefetch", [list(g) for g in groups]))

    def rope_attention(self, q, *a, **kw):
        self.calls.append(("attention", q.shape[0]))

    def matmul_multi(self, *a, **kw):
        pass


@pytest.mark.parametrize("T,armed", [(1, True), (16, True), (17, False)])
def test_attention_block_arms_wo_then_gate_then_up_before_decode_rows(T, armed):
    from bw24.engine.models.common import LayerWeights, Transformer

    cfg = SimpleNamespace(qkv_bias=False, swa_layers=[False, False], rope_type="neox", rope_dim=8, rope_base=1e4,
                          rope_base_swa=1e4, rope_freq_scale=1.0, rms_eps=1e-6, attn_scale=1.0, attn_softcap=None,
                          sliding_window=None)
    L = LayerWeights(attn_norm=0, wq="wq", wk="wk", wv="wv", wo="wo", ffn_norm=0, w_gate="g", w_up="u", w_down="d")
    L1 = LayerWeights(attn_norm=0, wq="wq1", wk="wk1", wv="wv1", wo="wo1", ffn_norm=0, router="r", gate_exps="ge")
    m = Transformer.__new__(Transformer)
    m.w = SimpleNamespace(layers=(L, L1))
    ops = _ArmRecorder()
    m.ops, m.cfg, m.kv = ops, cfg, SimpleNamespace(pos=0, k=[0, 0], v=[0, 0], n_past=T)
    b = SimpleNamespace(x=0, q=0, k=0, v=0, q3=np.zeros((T, 1, 8)), k3=0, v3=0, a3=0)
    m.attention(0, L, b)
    m.attention(1, L1, b)  # the last layer, a MoE one: its wo only
    want0 = [("prefetch", [["wo"], ["g"], ["u"], ["d"], ["wq1"], ["wk1"], ["wv1"]])] if armed else []
    want1 = [("prefetch", [["wo1"]])] if armed else []
    assert ops.calls == want0 + [("attention", T)] + want1 + [("attention", T)]


def test_table_built_once_per_planes_and_budget_and_never_inside_capture(helpers):
    def weight(n):
        return SimpleNamespace(planes={"a": np.zeros(n, np.uint8).view(helpers.HostDev)})

    w1, w2 = weight(4096), weight(8192)
    stream = type("Stream", (), {"__enter__": lambda s: s, "__exit__": lambda s, *a: None})()
    cu = SimpleNamespace(_l2_tables={}, _capturing=False, stream=stream, cp=SimpleNamespace(asarray=np.asarray))
    arr, n = prefetch.table(cu, ((w1,), (w2,)), 1 << 20)
    assert n == 2 and arr.tolist() == [w1.planes["a"].data.ptr, 4096, w2.planes["a"].data.ptr, 8192]
    assert prefetch.table(cu, ((w1,), (w2,)), 1 << 20)[0] is arr and len(cu._l2_tables) == 1
    cu._capturing = True
    assert prefetch.table(cu, ((w1,), (w2,)), 1 << 20)[0] is arr  # built: replays need nothing new
    with pytest.raises(RuntimeError, match="inside graph capture"):
        prefetch.table(cu, ((w2,),), 1 << 20)  # other weights (another model): a new table
