"""perf.breakdown: a decode token's device time by kernel family, from gpu_profile.py's JSON."""

from __future__ import annotations

import json

import pytest
from bw24.engine.perf import breakdown as bd

ROWS = [  # gpu_profile.py's [name, launches per token, µs per token], names as CUPTI demangles them
    ["void qmv8_3<7, 7, 7, 4, 4, 1>(signed char const*, int2 const*, int", 54.0, 680.0],
    ["void qmv3<7, 7, 9, 4, 4, 1>(float const*, int, int", 24.0, 270.0],
    ["void qmv<0, 1, 1, 1>(void const*, void const*", 48.0, 180.0],
    ["moe_route", 48.0, 232.0],
    ["void moe_gu<7, 2, 2>(void const*, void const*", 48.0, 577.0],
    ["void attn_split<128, 128, 4, 32, __half, false>(float const*", 36.0, 175.0],
    ["attn_combine", 36.0, 140.0],
    ["void rmsnorm_reg<4, 2>(float*, float const*", 73.0, 230.0],
    ["void rope_kv<__half>(float*, float const*", 36.0, 92.0],
    ["glu_q8", 36.0, 57.0],
    ["argmax_sample", 1.0, 7.0],
]


@pytest.mark.parametrize("name,fam", [
    ("void qmv8<9, 4, 4, 1>(void const*", "matvec, int8 activations"),  # before the fp32 pattern it also fits
    ("void qmv3<7, 7, 7, 1, 4, 1>(float const*", "matvec, fp32 activations"),
    ("moe_route", "MoE routing"), ("void moe_down<9, 2, 3>(void const*", "MoE experts"),
    ("attn_combine", "attention"), ("Memcpy DtoH (Device -> Pageable)", bd.OTHER), ("advance", bd.OTHER),
])
def test_family(name, fam):
    assert bd.family(name) == fam


def test_breakdown_sums_each_family_and_sorts_by_time():
    rows = bd.breakdown(ROWS)
    assert [f for f, *_ in rows][:3] == ["matvec, int8 activations", "MoE experts", "matvec, fp32 activations"]
    got = {f: (n, us) for f, n, us in rows}
    assert got["matvec, fp32 activations"] == (72.0, 450.0) and got["attention"] == (72.0, 315.0)
    assert sum(us for *_, us in rows) == pytest.approx(sum(us for *_, us in ROWS))  # nothing dropped


def test_table_and_cli(tmp_path, capsys):
    p = tmp_path / "profile_qwen3-x_d64.json"
    p.write_text(json.dumps({"decode": ROWS, "decode_us": 2500.0, "prefill": [], "pp_s": 0.03}))
    assert bd.main([str(p)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("| qwen3-x_d64 | 2,500 | 2,640 | matvec, int8 activations | 680.0 | 25.8% | 54 |")
    assert len(out) == 2 + 9  # header, rule, one line a family
    assert bd.main([str(tmp_path / "missing.json")]) == 2 and "no such profile file" in capsys.readouterr().err
