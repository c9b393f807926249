"""The README table is regenerated from JSONL rows and replaces only the marked section."""

from __future__ import annotations

import pytest
from bw24.engine.perf.errors import TableMarkersError
from bw24.engine.perf.table import BEGIN, END, render_table, write_table

ROWS = [
    {"device": "NVIDIA H200 sm_90a", "cell": "qwen3-8b-q4_k_m-tg128@d0", "mode": "decode", "decode_tok_s": 400.0,
     "llama_tok_s": 250.0, "ratio": 1.6, "roofline_pct": 44.4, "time": "2026-11-01T00:00:00Z", "git": "aaa1111",
     "dirty": False, "kv_dtype": "float16", "llama": {"build_commit": "b7000"}},
    {"device": "NVIDIA H200 sm_90a", "cell": "qwen3-8b-q4_k_m-tg128@d0", "mode": "decode", "decode_tok_s": 512.5,
     "llama_tok_s": 247.0, "ratio": 512.5 / 247.0, "roofline_pct": 56.9, "time": "2026-11-30T00:00:00Z",
     "git": "bbb2222", "dirty": True, "kv_dtype": "float16", "vram_peak_bytes": 5 * 2**30, "llama": {"build_commit": "b7001", "vram_peak_bytes": 6 * 2**30}},
    {"device": "cpu x", "cell": "qwen3-tiny-q8_0-pp32@d0", "mode": "prefill", "prefill_tok_s": 1234.5,
     "llama_tok_s": None, "ratio": None, "roofline_pct": None, "time": "2026-11-30T01:00:00Z", "git": "bbb2222"},
]


def test_render_uses_latest_row_per_device_cell():
    t = render_table(ROWS)
    lines = [ln for ln in t.splitlines() if ln.startswith("| qwen3")]
    assert len(lines) == 3 - 1  # two H200 rows collapse to the latest
    assert "| qwen3-8b-q4_k_m-tg128@d0 | 512.5 | 247.0 | 2.07x | 56.9 | f16 | 5.00 / 6.00 | 2026-11-30 | NVIDIA H200 sm_90a | bbb2222+ / llama.cpp b7001 |" in t
    assert "| qwen3-tiny-q8_0-pp32@d0 | 1,234.5 | — | — | — | f32 | — / — | 2026-11-30 | cpu x | bbb2222 |" in t
    assert "400.0" not in t


def test_write_replaces_only_the_marked_section(tmp_path):
    readme = tmp_path / "README.md"
    before, after = "# bw24\n\nintro text\n\n", "\nmore text after\n"
    readme.write_text(f"{before}{BEGIN}\n| old | table |\n{END}{after}")
    write_table(readme, ROWS, device="cpu x")
    text = readme.read_text()
    assert text.startswith(before + BEGIN + "\n| cell | bw24 tok/s |")
    assert text.endswith(END + after)
    assert "| old | table |" not in text and "1,234.5" in text and "512.5" not in text
    write_table(readme, ROWS, device="cpu x")  # idempotent
    assert readme.read_text() == text


@pytest.mark.parametrize("body", ["no markers\n", f"{END}\n{BEGIN}\n", f"{BEGIN} only\n"])
def test_write_without_markers_is_a_typed_error(tmp_path, body):
    p = tmp_path / "README.md"
    p.write_text(body)
    with pytest.raises(TableMarkersError, match="perf-table"):
        write_table(p, ROWS)
    assert p.read_text() == body


def test_render_keeps_opt_in_variants_apart():
    plain = dict(ROWS[1])
    opt = dict(ROWS[1], decode_tok_s=530.0, opt_in=["attn_q8", "norm_epi"])
    t = render_table([plain, opt])
    assert "| 512.5 |" in t and "| 530.0 |" in t
    assert "| f16 +attn_q8 +norm_epi |" in t and "| f16 |" in t


def test_render_keeps_kv_caches_apart():
    """A float32-cache row (and one written before rows carried kv_dtype) is another configuration: its
    own line, the KV column naming the cache once."""
    f32 = dict(ROWS[1], decode_tok_s=480.0, kv_dtype="float32")
    old = {k: v for k, v in ROWS[1].items() if k != "kv_dtype"} | {"decode_tok_s": 470.0}
    t = render_table([f32, ROWS[1]])
    assert "| 480.0 |" in t and "| 512.5 |" in t and "| f32 |" in t and "| f16 |" in t and "kv_" not in t
    assert "| 470.0 |" in render_table([f32, old]) and "| 480.0 |" not in render_table([f32, old])
