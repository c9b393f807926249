"""benchmarks/ingest_evidence.py: a GPU session's /tmp/r into the evidence folder's names and its perf rows
into benchmarks/perf.jsonl (only after the committed rows, which the host's copy must start with)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ingest_evidence.py"


@pytest.fixture
def ingest(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("ingest_evidence", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ev, perf = tmp_path / "evidence", tmp_path / "perf.jsonl"
    ev.mkdir()
    perf.write_text('{"row": 1}\n{"row": 2}\n')
    monkeypatch.setattr(mod, "EVIDENCE", ev)
    monkeypatch.setattr(mod, "PERF", perf)
    monkeypatch.setattr(mod, "MANIFEST", tmp_path / "kernel_manifest_h200.jsonl")
    return mod, ev, perf


def _session(r: Path, perf_rows: list[dict]) -> None:
    (r / "BW24_UBATCH_2048").mkdir(parents=True)
    (r / "BW24_ATTN_MMA_1").mkdir()
    (r / "spec_pair").mkdir()
    (r / "profile").mkdir()
    hdr = "# device: NVIDIA H200, 580; date: 2026-11-30; git: abc1234\n"
    (r / "kernel_check.log").write_text(hdr + "421 cases\n")
    (r / "perf_1a2b3c.log").write_text(hdr + "cells\n")
    (r / "BW24_UBATCH_2048" / "perf_4d5e6f.log").write_text(hdr + "ubatch cells\n")
    (r / "BW24_ATTN_MMA_1" / "profile.log").write_text("x/profiler.py:224: UserWarning: clears\n  _warn_once(\n## decode\n")
    (r / "run_gen_smollm2-135m.log").write_text(hdr + "MATCH\n")
    (r / "spec_pair.log").write_text(hdr + "pair 0.54x\n")
    (r / "spec_pair" / "spec_bench.jsonl").write_text("{}\n")
    (r / "BW24_PDL_0" / "profile").mkdir(parents=True)
    (r / "BW24_PDL_0" / "profile" / "profile_x.json").write_text('{"decode": []}')
    (r / "BW24_PDL_0" / "profile" / "profile_x.txt").write_text("## decode\n")
    (r / "nb").mkdir()
    (r / "nb" / "tune_qmatvec.log").write_text(hdr + "wrote table\n")
    (r / "nb" / "nvidia-h200-sm90.json").write_text('{"schema": 1}')
    (r / "BW24_NORM_AHEAD_1").mkdir()
    (r / "BW24_NORM_AHEAD_1" / "perf_ab.log").write_text(hdr + "== - round 1\n")  # the ab stage: bw24 alone
    (r / "BW24_NORM_AHEAD_1" / "perf_ab.jsonl").write_text('{"ab": 1}\n')
    (r / "perf.jsonl").write_text("".join(json.dumps(x) + "\n" for x in perf_rows))


def test_logs_land_under_evidence_names_and_new_rows_append(ingest, tmp_path):
    mod, ev, perf = ingest
    r = tmp_path / "r"
    _session(r, [{"row": 1}, {"row": 2}, {"row": 3}])
    assert mod.main([str(r), "abc1234"]) == 0
    assert sorted(str(p.relative_to(ev)) for p in ev.rglob("*") if p.is_file()) == [
        "kernel_check_h200_abc1234.log", "perf_ab_h200_abc1234_norm_ahead.jsonl", "perf_ab_h200_abc1234_norm_ahead.log",
        "perf_h200_abc1234.log", "perf_h200_abc1234_ubatch_2048.log",
        "profile_abc1234_pdl_0/profile_x.json", "profile_h200_abc1234_attn_mma.txt",
        "run_gen_smollm2-135m_cuda_h200_abc1234.log", "spec_bench_h200_abc1234_pair.jsonl",
        "spec_bench_h200_abc1234_pair.txt", "tuning_h200_abc1234_nvidia-h200-sm90.json",
        "wb_tune_qmatvec_h200_abc1234.log"]
    # JSON as it came (no header line: it must still parse)
    assert json.loads((ev / "profile_abc1234_pdl_0" / "profile_x.json").read_text()) == {"decode": []}
    assert json.loads((ev / "tuning_h200_abc1234_nvidia-h200-sm90.json").read_text()) == {"schema": 1}
    prof = (ev / "profile_h200_abc1234_attn_mma.txt").read_text().splitlines()
    assert prof[0].startswith("# device: NVIDIA H200; git: abc1234") and prof[1:] == ["## decode"]  # warnings gone
    assert (ev / "kernel_check_h200_abc1234.log").read_text().startswith("# device: NVIDIA H200, 580; date:")
    assert perf.read_text().splitlines() == ['{"row": 1}', '{"row": 2}', '{"row": 3}']  # no ab row among them


def test_a_host_file_that_is_not_the_committed_one_plus_rows_writes_nothing(ingest, tmp_path, capsys):
    mod, ev, perf = ingest
    r = tmp_path / "r"
    _session(r, [{"row": 1}, {"row": 9}, {"row": 3}])
    assert mod.main([str(r), "abc1234"]) == 1
    assert "line 2 differs" in capsys.readouterr().err
    assert list(ev.iterdir()) == [] and perf.read_text() == '{"row": 1}\n{"row": 2}\n'
    assert mod.main([str(r), "not-a-sha"]) == 2


def test_with_folder_suffixes_name_the_variant_without_a_colon(ingest):
    mod = ingest[0]
    assert mod.suffix_of("BW24_ATTN_DECODE_32:66") == "_attn_decode_32x66"
    assert mod.suffix_of("BW24_PREFILL_GRAPH_1") == "_prefill_graph" and mod.suffix_of("BW24_PDL_0") == "_pdl_0"
    # a nested `with` (the MoE opt-ins' gate) and the moesweep stage's log
    rel = Path("BW24_GATE_SENSITIVITY_1/BW24_MOE_Q8_1/BW24_MOE_ROUTER_1/run_gen_qwen3-30b-a3b-q4_k_m-s1.log")
    assert mod.target_name(rel, "abc1234") == \
        "run_gen_qwen3-30b-a3b-q4_k_m-s1_cuda_h200_abc1234_gate_sensitivity_moe_q8_moe_router.log"
    assert mod.target_name(Path("moe_decode.log"), "abc1234") == "moe_decode_h200_abc1234.log"
    assert mod.target_name(Path("overlap.log"), "abc1234") == "overlap_h200_abc1234.log"
    assert mod.target_name(Path("attn_sweep.log"), "abc1234") == "attn_sweep_h200_abc1234.log"
    assert mod.target_name(Path("loop_gap.log"), "abc1234") == "loop_gap_h200_abc1234.log"
    assert mod.target_name(Path("ranks_q05.json"), "abc1234") == "frspec_ranks_q05_h200_abc1234.json"
    assert mod.target_name(Path("ranks_q05.log"), "abc1234") == "frspec_ranks_q05_h200_abc1234.log"
    # the ncu stage's reports (PRESET:QUANT:DEPTH and the kernel regex in the name), under a `with` too
    assert mod.target_name(Path("BW24_PDL_0/ncu_qwen3-32b_q4_k_m_4096_attn__T1.txt"), "abc1234") == \
        "ncu_h200_abc1234_pdl_0_qwen3-32b_q4_k_m_4096_attn__T1.txt"
    assert mod.target_name(Path("ncu_T1.log"), "abc1234") is None
    assert mod.target_name(Path("bg_s.out"), "abc1234", "h100") == "bg_s_h100_abc1234.txt"  # a chain's own log
    assert mod.target_name(Path("bg_s.pid"), "abc1234") is None
    # the loads stage: its log and summary, its candidate table as it is; its best_* files stay behind
    assert mod.target_name(Path("loads/qmv8_loads.log"), "abc1234") == "qmv8_loads_h200_abc1234.log"
    assert mod.target_name(Path("loads/summary.txt"), "abc1234") == "qmv8_loads_summary_h200_abc1234.txt"
    assert mod.target_name(Path("loads/table/nvidia-h200-sm90.json"), "abc1234") == \
        "tuning_h200_abc1234_loads_candidate_nvidia-h200-sm90.json"
    assert mod.target_name(Path("loads/best_8b"), "abc1234") is None
    # the mvbench stage's log and pytest-benchmark JSON
    assert mod.target_name(Path("mvbench.log"), "abc1234") == "mvbench_h200_abc1234.log"
    assert mod.target_name(Path("mvbench.json"), "abc1234") == "mvbench_h200_abc1234.json"
    # the variant stage: its table as the ab stage ran it, and its printout
    assert mod.target_name(Path("tables/wave1/nvidia-h200-sm90.json"), "abc1234") == \
        "tuning_h200_abc1234_variant_wave1.json"
    assert mod.target_name(Path("tables_wave1.log"), "abc1234") == "tuning_h200_abc1234_variant_wave1.log"
    # the streamprobe stage's log and rows; a `with` of a path (its folder named by the last part since e223fb5)
    assert mod.target_name(Path("stream_probe.log"), "abc1234") == "stream_probe_h200_abc1234.log"
    assert mod.target_name(Path("stream_probe/stream_probe.json"), "abc1234") == "stream_probe_h200_abc1234.json"
    assert mod.target_name(Path("dequant.log"), "abc1234") == "dequant_h200_abc1234.log"  # the dequant stage
    # the pytest stage: the whole suite, and a selection (pytest overlap) in a log of its own
    assert mod.target_name(Path("pytest_gpu.log"), "abc1234", "h100") == "pytest_gpu_h100_abc1234.log"
    assert mod.target_name(Path("pytest_gpu_k_overlap.log"), "abc1234", "h100") == \
        "pytest_gpu_h100_abc1234_k_overlap.log"
    assert mod.target_name(Path("dequant/dequant.json"), "abc1234", "h100") == "dequant_h100_abc1234.json"
    assert mod.target_name(Path("BW24_TUNING_DIR_w32/perf_8ee999.log"), "abc1234") == \
        "perf_h200_abc1234_tuning_dir_w32.log"


def test_the_session_kernel_manifest_merges_into_the_committed_one_once_each(ingest, tmp_path):
    """R_DIR/kernel_manifest.jsonl (the modules kernel-check and pytest loaded, duplicated across processes and
    key order) joins the committed manifest, each module once, sorted; a session without one leaves it alone."""
    mod, _, _ = ingest
    committed = tmp_path / "kernel_manifest_h200.jsonl"
    committed.write_text('{"defines": [["BW24_PDL", 1]], "file": "norm.cu", "names": []}\n')
    r = tmp_path / "r"
    r.mkdir()
    (r / "perf.jsonl").write_text('{"row": 1}\n{"row": 2}\n')
    assert mod.main([str(r), "abc1234"]) == 0
    assert committed.read_text().count("\n") == 1  # no session manifest: untouched
    a = {"file": "attention.cu", "names": ["attn_split<128,128,4,32,__half>"],
         "defines": [["BW24_PDL", 1], ["BW24_PLANTED_FILL", 1]]}
    (r / "kernel_manifest.jsonl").write_text("\n".join([json.dumps(a), json.dumps(dict(reversed(a.items()))),
                                                       '{"file": "norm.cu", "names": [], "defines": [["BW24_PDL", 1]]}'])
                                            + "\n")
    assert mod.main([str(r), "abc1234"]) == 0
    got = [json.loads(ln) for ln in committed.read_text().splitlines()]
    assert got == [a, {"defines": [["BW24_PDL", 1]], "file": "norm.cu", "names": []}]


def test_logs_another_commits_session_wrote_are_left_out_and_named(ingest, tmp_path, capsys):
    """A stale /tmp/r on the host (e223fb5's pack held f020fd1's kernel-check and perf logs): a log whose header names
    another commit is not filed under this one; a part of a merged log likewise; a prefix of the sha counts as it."""
    mod, ev, perf = ingest
    r = tmp_path / "r"
    _session(r, [{"row": 1}, {"row": 2}])
    old = "# device: NVIDIA H200, 580; date: 2026-11-29; git: f020fd1\n"
    (r / "kernel_check.log").write_text(old + "604 cases\n")
    (r / "perf_000000.log").write_text(old + "old cells\n")
    (r / "run_gen_smollm2-135m.log").write_text("# device: NVIDIA H200; git: abc1234def\nMATCH\n")  # longer sha: ours
    (r / "probe").mkdir()  # a stage folder's file (no header) goes with its stage's log (7f1070b's stale ceilings)
    (r / "probe.log").write_text(old + "hbm read\n")
    (r / "probe" / "ceilings.json").write_text('{"schema": 1}')
    assert mod.main([str(r), "abc1234"]) == 0
    out = capsys.readouterr().out
    assert "left out probe/ceilings.json (git f020fd1)" in out and not (ev / "ceilings_h200_abc1234.json").exists()
    assert "left out kernel_check.log (git f020fd1)" in out and "left out perf_000000.log (git f020fd1)" in out
    assert not (ev / "kernel_check_h200_abc1234.log").exists()
    assert (ev / "perf_h200_abc1234.log").read_text().count("# device") == 1  # perf_1a2b3c's part alone
    assert "old cells" not in (ev / "perf_h200_abc1234.log").read_text()
    assert (ev / "run_gen_smollm2-135m_cuda_h200_abc1234.log").exists()


def test_an_h100_sessions_logs_are_filed_under_h100_names(ingest, tmp_path, capsys):
    """The GPU comes from the logs' "# device:" line: an H100 that came for the H200 (e3a8180's session) files its
    logs as *_h100_*, never beside the H200's under h200 names; the probe stage's log and ceilings record too. A
    folder whose logs name no GPU is refused unless --device says which."""
    mod, ev, perf = ingest
    assert mod.gpu_tag("NVIDIA H200") == "h200" and mod.gpu_tag("NVIDIA H100 80GB HBM3") == "h100"
    assert mod.gpu_tag("NVIDIA GeForce RTX 4090") == "nvidia-geforce-rtx-4090"
    r = tmp_path / "r"
    (r / "probe").mkdir(parents=True)
    hdr = "# device: NVIDIA H100 80GB HBM3, 580.95; date: 2026-12-06; git: abc1234\n"
    (r / "warm.log").write_text(hdr + "warm rc=0\n")
    (r / "kernel_check.log").write_text(hdr + "ALL GREEN\n")
    (r / "probe.log").write_text(hdr + "hbm read 3.0 TB/s\n")
    (r / "probe" / "ceilings.json").write_text('{"schema": 1}')
    (r / "perf_ab.log").write_text("== - round 1\n")  # no header: ingest adds the H100's
    assert mod.main([str(r), "abc1234"]) == 0
    assert sorted(p.name for p in ev.iterdir()) == ["ceilings_h100_abc1234.json", "kernel_check_h100_abc1234.log",
                                                     "perf_ab_h100_abc1234.log", "probe_h100_abc1234.log"]
    assert (ev / "perf_ab_h100_abc1234.log").read_text().startswith("# device: NVIDIA H100 80GB HBM3; git: abc1234")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "perf_ab.log").write_text("== - round 1\n")
    assert mod.main([str(bare), "abc1234"]) == 2 and "--device" in capsys.readouterr().err
    assert mod.main([str(bare), "abc1234", "--device", "NVIDIA H200"]) == 0
    assert (ev / "perf_ab_h200_abc1234.log").is_file()
