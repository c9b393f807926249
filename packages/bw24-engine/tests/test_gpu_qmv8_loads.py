"""benchmarks/gpu_qmv8_loads.py's candidate table (the sweep itself needs a GPU: the session's `loads` stage runs
it): which shapes it rewrites, and that the file it writes is a table the engine loads, with those entries and the
rest of the committed table as it was."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest


@pytest.fixture(scope="module")
def sweep(helpers):
    return helpers.bench_module("gpu_qmv8_loads")


def test_a_shape_is_rewritten_only_past_the_margin_and_for_the_models_it_runs_on(sweep):
    """The 32B's Q4_K down projection 10% faster at (4, 2, 4): rewritten, with its loads. The 8B's Q6_K down 2%
    faster: inside the margin, kept. The 0.6B's (norm-ahead producers, not what the sweep times): never. A winner
    at loads 0 carries no "loads" key; the table's config is compared at the table's own loads."""
    t = {("32b", "down", "Q4_K"): ({(8, 1, 0): 10.0, (4, 2, 4): 9.0, (4, 2, 0): 9.8}, (8, 1), 1),
         ("8b", "down", "Q6_K"): ({(1, 1, 0): 10.0, (1, 1, 2): 9.8}, (1, 1), 1),
         ("0.6b", "wo", "Q4_K"): ({(2, 2, 0): 10.0, (1, 1, 8): 5.0}, (2, 2), 1),
         ("8b", "wo", "Q4_K"): ({(4, 4, 0): 10.0, (2, 2, 0): 9.0}, (4, 4), 1),
         ("8b", "gate_up", "Q4_K"): ({(2, 4, 0): 10.0, (2, 4, 2): 8.0, (4, 4, 0): 9.5}, (2, 4), 1)}
    got = sweep.candidate_entries(t, {("Q4_K", "24576x4096"): 2})
    assert got == {("Q4_K", "5120x25600"): {"warps": 4, "rows": 2, "loads": 4},
                   ("Q4_K", "4096x4096"): {"warps": 2, "rows": 2}}
    # (gate/up: the table's own entry already carries loads 2, the fastest: nothing to rewrite)
    assert sweep.MARGIN == 0.03 and "0.6b" not in sweep.CANDIDATE_MODELS


def test_the_candidate_file_is_a_table_the_engine_reads(sweep, tmp_path, monkeypatch):
    """write_candidate: the committed H200 table with the entries in place (every other entry as it was), valid for
    bw24.runtime's reader, under OUTDIR/table/<device-key>.json, so BW24_TUNING_DIR=OUTDIR/table takes it; nothing
    written when there is no entry. Canary: a shape not rewritten keeps the committed config."""
    import bw24.runtime as rt
    from bw24.engine.ops.cuda.launch import TUNING_DIR, QmvConfigs
    from bw24.runtime import load_tuning
    from gguf.constants import GGMLQuantizationType as Q

    monkeypatch.setattr(rt, "device_info", lambda: SimpleNamespace(name="NVIDIA H200", cc=(9, 0)))
    assert sweep.write_candidate(tmp_path, {}, "none") is None and not (tmp_path / "table").exists()
    entries = {("Q4_K", "4096x4096"): {"warps": 2, "rows": 2}, ("Q8_0", "4096x12288"): {"warps": 1, "rows": 2, "loads": 4}}
    path = sweep.write_candidate(tmp_path, entries, "a test")
    assert path == tmp_path / "table" / "nvidia-h200-sm90.json"
    new = QmvConfigs(load_tuning(path.parent, "nvidia-h200-sm90"))
    old = QmvConfigs(load_tuning(TUNING_DIR, "nvidia-h200-sm90"))
    assert new.plan(Q.Q4_K, 4096, 4096)[1:] == (2, 2) and old.plan(Q.Q4_K, 4096, 4096)[1:] == (4, 8)
    assert new.plan(Q.Q8_0, 4096, 12288)[1:] == (1, 2) and new.loads(Q.Q8_0, 4096, 12288) == 4
    assert new.plan(Q.Q6_K, 5120, 25600) == old.plan(Q.Q6_K, 5120, 25600)  # not rewritten: as committed
    assert new.loads(Q.Q4_K, 4096, 12288) == old.loads(Q.Q4_K, 4096, 12288) == 8
    data = json.loads(path.read_text())
    assert data["provenance"]["qmatvec_loads_candidate"]["entries"]["Q8_0 4096x12288"]["loads"] == 4
