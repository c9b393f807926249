"""kernel_cases_q8.qkv_rope_case (kernel-check's `qkv rope` cases, BW24_QKV_ROPE) on the host stand-in for the CUDA
backend (conftest.HostQ8Ops: CudaOps' own dispatch, each launch done by its kernel's formula): green on the formulas,
red with the planted kernel (the new cache rows one position late), red where the decode build spills (nothing fused
would be checked), and a spilled 3-token build falls back to the unfused rows and stays green. The kernel itself runs
in the GPU's kernel-check and in test_cuda_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine.kernel_cases_q8 import qkv_rope_case
from bw24.engine.ops.ref import RefOps
from gguf.constants import GGMLQuantizationType as Q

QKV = (Q.Q4_K, Q.Q4_K, Q.Q6_K)
CASES = [(QKV, 1, True, "neox", True), (QKV, 1, False, "neox", True), ((Q.Q4_K,) * 3, 1, False, "norm", False),
         (QKV, 3, True, "neox", True)]


def _case(qts, T, na, mode, qkn):
    return qkv_rope_case(qts, T, 1024, 16, 8, 128, (1, 4), na, mode, qkn)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"T={c[1]} na={c[2]} {c[3]}")
def test_green_on_the_formulas_red_with_the_rows_one_position_late(case, helpers):
    cu = helpers.host_q8()
    r = _case(*case)("qkv rope", RefOps(), cu, np.random.default_rng(5))
    assert r.ok, r
    names = [n for n, *_ in cu.launches]
    assert any(n.startswith("qmv8_qkvr") for n in names) and not cu.qkv_rope and not cu.norm_ahead
    assert not _case(*case)("qkv rope", RefOps(), helpers.host_q8("planted_qkvr"), np.random.default_rng(5)).ok


def test_red_where_the_decode_build_spills_and_a_spilled_verify_build_falls_back(helpers):
    r = _case(*CASES[0])("qkv rope", RefOps(), helpers.host_q8(spills=lambda name: 116), np.random.default_rng(1))
    assert not r.ok and "build False" in r.case
    verify_spills = lambda name: 1536 if name.startswith("qmv8_qkvr") and ",3,true" in name else 0  # noqa: E731
    cu = helpers.host_q8(spills=verify_spills)
    assert _case(*CASES[3])("qkv rope", RefOps(), cu, np.random.default_rng(1)).ok
    names = [n for n, *_ in cu.launches]
    assert any(n.startswith("qmv8_qkvr") and ",1,true" in n for n in names) and "rope_kv<__half>" in names
    bad = helpers.host_q8("planted_qkvr", spills=verify_spills)
    assert not _case(*CASES[3])("qkv rope", RefOps(), bad, np.random.default_rng(1)).ok
