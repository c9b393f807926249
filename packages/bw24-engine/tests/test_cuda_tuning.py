"""The per-device tuning table (CPU only): the committed H200 table loads and drives the matvec
dispatcher; a corrupt table gives a clear error and the dispatcher falls back to built-in defaults."""

from __future__ import annotations

import json

import pytest
from bw24.engine.ops.cuda.launch import TUNING_DIR, QmvConfigs, default_qmv
from bw24.runtime import TuningTableError, device_key, load_tuning, read_table
from gguf.constants import GGMLQuantizationType as Q

H200 = device_key("NVIDIA H200", (9, 0))


def test_committed_h200_table_loads_and_is_used():
    t = load_tuning(TUNING_DIR, H200)
    assert t.note == f"tuning table {H200}.json"
    cfg = QmvConfigs(t)
    entry = t.table["qmatvec"]["Q4_K"]
    shape, want = next(iter(entry["shapes"].items()))
    n, k = map(int, shape.split("x"))
    assert cfg.get(Q.Q4_K, n, k) == (want["warps"], want["rows"])
    # an unlisted shape takes the type's default entry, not the built-in one
    assert cfg.get(Q.Q4_K, 7, 4096) == (entry["default"]["warps"], entry["default"]["rows"])


def test_unknown_device_gets_builtin_defaults():
    t = load_tuning(TUNING_DIR, device_key("Some Future GPU", (13, 0)))
    assert t.table == {} and "built-in defaults" in t.note
    d = default_qmv(4096, 4096)
    assert QmvConfigs(t).get(Q.Q8_0, 4096, 4096) == (d["warps"], d["rows"])


@pytest.mark.parametrize("corrupt", ["{not json", json.dumps({"schema": 1, "device": "NVIDIA H200", "cc": "9.0"}),
                                     json.dumps({"schema": 1, "device": "NVIDIA H200", "cc": "9.0", "key": H200,
                                                 "qmatvec": {"Q4_K": {"shapes": {}}}})])
def test_corrupt_table_is_a_clear_error_and_falls_back(tmp_path, corrupt):
    p = tmp_path / f"{H200}.json"
    p.write_text(corrupt)
    with pytest.raises(TuningTableError, match=str(p.name)):
        read_table(p)
    warned: list[str] = []
    t = load_tuning(tmp_path, H200, warn=warned.append)
    assert t.table == {} and len(warned) == 1 and "corrupt tuning table" in warned[0]
    d = default_qmv(12288, 4096)
    assert QmvConfigs(t).get(Q.Q4_K, 12288, 4096) == (d["warps"], d["rows"])


def test_out_of_space_entry_falls_back_instead_of_launching_it(tmp_path):
    bad = {"schema": 1, "device": "NVIDIA H200", "cc": "9.0", "key": H200,
           "qmatvec": {"Q8_0": {"default": {"warps": 3, "rows": 5}}}}
    (tmp_path / f"{H200}.json").write_text(json.dumps(bad))
    t = load_tuning(tmp_path, H200)
    d = default_qmv(4096, 4096)
    assert QmvConfigs(t).get(Q.Q8_0, 4096, 4096) == (d["warps"], d["rows"])


def test_default_qmv_small_weights_take_one_row_a_block():
    """A weight of fewer than SMALL_N rows (a MoE router, 128 x 2048 in F32) gets one row per block, so its
    launch has N blocks rather than N / 4; W (the summation order) is the rule's for its K as before."""
    from bw24.engine.ops.cuda.launch import SMALL_N

    assert default_qmv(128, 2048) == {"warps": 1, "rows": 1}
    assert default_qmv(SMALL_N - 1, 4096) == {"warps": 4, "rows": 1}
    assert default_qmv(SMALL_N, 4096) == {"warps": 4, "rows": 8} and default_qmv(4096, 1024) == {"warps": 1, "rows": 4}
