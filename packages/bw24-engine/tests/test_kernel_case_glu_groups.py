"""kernel_cases_q8.glu_groups_case (kernel-check's `glu groups` cases, BW24_GLU_GROUPS) on a host stand-in for the
CUDA backend: CudaOps' own dispatch (matmul_norm_ahead, ffn_glu, glu, the q8 launchers) runs as it is, and each
launch it makes is done on the host by its kernel's formula (the q8 twins of ops/cuda/q8.py). Green on that, red
with the planted epilogue (the activation left out), red when the fused launch does not run at T = 1 (a spilled
build), and a spilled 5-token build falls back to the unfused rows and stays green. The kernel itself runs in the
GPU's kernel-check and in test_cuda_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine.kernel_cases_q8 import glu_groups_case
from bw24.engine.ops.ref import RefOps
from gguf.constants import GGMLQuantizationType as Q

f32 = np.float32


CASES = [(Q.Q4_K, 1, 1024, 3072, (1, 4), True), (Q.Q4_K, 1, 1024, 3072, (1, 4), False),
         (Q.Q4_K, 5, 1024, 3072, (1, 4), True), (Q.Q8_0, 1, 2048, 1024, (2, 8), False)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name} T={c[1]} na={c[5]}")
def test_green_on_the_formulas_red_without_the_activation(case, helpers):
    rng = lambda: np.random.default_rng(7)  # noqa: E731 (the same draws for both runs)
    cu = helpers.host_q8()
    r = glu_groups_case(*case)("glu groups", RefOps(), cu, rng())
    assert r.ok, r
    assert "qmv8_glu" in [n.split("<")[0] for n, *_ in cu.launches] and not cu.glu_groups and not cu.norm_ahead
    assert not glu_groups_case(*case)("glu groups", RefOps(), helpers.host_q8(planted="planted_glug"), rng()).ok


def test_red_where_the_decode_build_spills_and_a_spilled_verify_build_falls_back(helpers):
    """A T = 1 case whose fused build spills (so the unfused launches run) is red: it would check nothing fused. A
    5-token case whose T = 5 build spills runs the unfused launches there, green against its fused decode rows; with
    the planted epilogue those decode rows go red."""
    spill_all = helpers.host_q8(spills=lambda name: 400)
    assert not glu_groups_case(*CASES[0])("glu groups", RefOps(), spill_all, np.random.default_rng(1)).ok
    verify_spills = lambda name: 332 if name.startswith("qmv8_glu") and ",5," in name else 0  # noqa: E731
    cu = helpers.host_q8(spills=verify_spills)
    assert glu_groups_case(*CASES[2])("glu groups", RefOps(), cu, np.random.default_rng(1)).ok
    names = [n for n, *_ in cu.launches]
    assert any(n.startswith("qmv8_glu") and ",1," in n for n in names) and "glu_q8" in names
    bad = helpers.host_q8(planted="planted_glug", spills=verify_spills)
    assert not glu_groups_case(*CASES[2])("glu groups", RefOps(), bad, np.random.default_rng(1)).ok
