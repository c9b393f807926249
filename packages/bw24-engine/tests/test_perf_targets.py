"""Issue 5's targets: each target's standing is worked out from the perf rows (never typed), a row short of its
target reads 'not met' with what it needs, and a missing measurement shows as such."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bw24.engine.cli import main
from bw24.engine.perf.cells import load_cells
from bw24.engine.perf.errors import TableMarkersError, TargetsFileError
from bw24.engine.perf.table import BEGIN as TABLE_BEGIN
from bw24.engine.perf.table import END as TABLE_END
from bw24.engine.perf.table import render_table, write_sections
from bw24.engine.perf.targets import (
    BEGIN,
    END,
    Target,
    load_targets,
    render_targets,
    standings,
)

ROOT = Path(__file__).resolve().parents[3]
H200 = "NVIDIA H200 sm_90a"
CELL = "qwen3-8b-q4_k_m-tg128@d0"
T8B = Target(CELL, ratio=2.0, roofline_pct=55.0)


def row(ratio: float, roofline: float = 60.0, *, cell: str = CELL, git: str = "abc1234", vram: float = 5.0,
        llama_vram: float = 5.0, **extra) -> dict:
    r = {"device": H200, "cell": cell, "mode": "decode", "decode_tok_s": 250.0 * ratio, "llama_tok_s": 250.0,
         "ratio": ratio, "roofline_pct": roofline, "time": "2026-12-03T00:00:00Z", "git": git, "kv_dtype": "float16",
         "vram_peak_bytes": vram * 2**30, "llama": {"vram_peak_bytes": llama_vram * 2**30}}
    r.update(extra)
    return r


def verdict(rows: list[dict], target: Target = T8B) -> str:
    return standings(rows, [target])[(H200, target.cell)].verdict()


def test_a_row_at_its_target_is_met():
    assert verdict([row(2.0, 55.0)]) == "**met**"
    assert verdict([row(2.31, 61.0)]) == "**met**"


def test_canary_a_row_five_percent_short_is_not_met_and_says_by_how_much():
    assert verdict([row(2.0 * 0.95, 60.0)]) == "not met: ratio needs +5.3%"
    assert verdict([row(2.1, 55.0 * 0.95)]) == "not met: roofline needs +5.3%"
    assert verdict([row(1.9, 52.25)]) == "not met: ratio needs +5.3%; roofline needs +5.3%"


def test_peak_vram_past_llama_cpp_plus_ten_percent_is_not_met():
    assert verdict([row(2.2, vram=5.5, llama_vram=5.0)]) == "**met**"  # +10.0%: within
    assert verdict([row(2.2, vram=5.6, llama_vram=5.0)]) == "not met: peak VRAM +12.0% over llama.cpp's"


def test_the_latest_default_row_beside_llama_cpp_counts():
    rows = [row(2.2, git="old0001"), row(1.8, git="new0002"),
            row(2.5, git="optin03", opt_in=["attn_fuse"]),  # another configuration
            row(2.5, git="f32kv04", kv_dtype="float32"),  # another cache
            dict(row(2.5, git="alone05"), llama_tok_s=None, ratio=None),  # no llama.cpp arm
            row(2.5, git="other06", cell="qwen3-8b-q4_k_m-tg128@d4096")]
    s = standings(rows, [T8B])
    assert list(s) == [(H200, CELL)] and s[(H200, CELL)].row["git"] == "new0002"
    assert s[(H200, CELL)].verdict().startswith("not met: ratio needs +11.1%")


def test_render_shows_a_target_nobody_measured():
    other = Target("qwen3-8b-q8_0-pp512@d0", ratio=1.5)
    t = render_targets([row(2.1)], [T8B, other])
    lines = t.splitlines()
    assert lines[0].startswith("| cell | target |") and len(lines) == 4
    assert re.match(rf"\| {CELL} \| >= 2x, 55% roofline \| 525\.0 \| 250\.0 \| 2\.10x \| 60\.0 \| 5\.00 / 5\.00 \| "
                    rf"\*\*met\*\* \| 2026-12-03 \| {H200} \| abc1234 \|$", lines[2])
    assert lines[3].startswith("| qwen3-8b-q8_0-pp512@d0 | >= 1.5x |") and "no row beside llama.cpp yet" in lines[3]


def test_write_replaces_both_sections_or_neither(tmp_path):
    p = tmp_path / "README.md"
    body = f"# x\n{TABLE_BEGIN}\nold table\n{TABLE_END}\nmid\n{BEGIN}\nold targets\n{END}\ntail\n"
    p.write_text(body)
    both = {(TABLE_BEGIN, TABLE_END): render_table([row(2.1)]), (BEGIN, END): render_targets([row(2.1)], [T8B])}
    write_sections(p, both)
    text = p.read_text()
    assert "old table" not in text and "old targets" not in text and text.endswith(f"{END}\ntail\n")
    assert "| **met** |" in text and f"| {CELL} | 525.0 |" in text
    only_table = f"{TABLE_BEGIN}\nold table\n{TABLE_END}\n"
    p.write_text(only_table)
    with pytest.raises(TableMarkersError, match="perf-targets"):
        write_sections(p, both)
    assert p.read_text() == only_table


@pytest.mark.parametrize("toml, message", [
    ("", "no \\[\\[target\\]\\] tables"),
    ("[[target]]\ncell = 'c'\n", "missing field 'ratio'"),
    ("[[target]]\nratio = 2.0\n", "'cell'"),
    ("[[target]]\ncell = 'c'\nratio = -1\n", "ratio must be a number >= 0"),
    ("[[target]]\ncell = 'c'\nratio = 2\nspeed = 3\n", "unknown field\\(s\\) speed"),
    ("[[target]]\ncell = 'c'\nratio = 2\n[[target]]\ncell = 'c'\nratio = 3\n", "has two targets"),
    ("[[target]\n", "not valid TOML"),
])
def test_a_bad_targets_file_is_a_typed_error(tmp_path, toml, message):
    p = tmp_path / "targets.toml"
    p.write_text(toml)
    with pytest.raises(TargetsFileError, match=message):
        load_targets(p)


def test_the_committed_targets_are_issue_5s_and_name_committed_cells():
    targets = {t.cell: t for t in load_targets(ROOT / "benchmarks" / "targets.toml")}
    cells = {c.id for c in load_cells(ROOT / "benchmarks" / "cells.toml")}
    assert set(targets) <= cells
    assert targets["qwen3-0.6b-q4_k_m-tg128@d4096"].ratio == 3.0
    assert targets["qwen3-8b-q4_k_m-tg128@d0"].roofline_pct == 55.0
    assert targets["qwen3-32b-q4_k_m-tg128@d4096"].ratio == 1.8
    assert targets["qwen3-8b-q8_0-tg128@d4096"].ratio == 1.5
    prefill = [c for c in cells if "-pp" in c and not c.startswith("smollm2")]
    assert prefill and all(targets[c].ratio == 1.5 for c in prefill)  # every model's pp512 and pp4096
    assert all(t.vram_margin == 0.10 for t in targets.values())


def test_cli_writes_both_sections_and_refuses_a_bad_targets_file(tmp_path, capsys):
    perf = tmp_path / "perf.jsonl"
    perf.write_text("".join(json.dumps(r) + "\n" for r in [row(1.9)]))
    targets = tmp_path / "targets.toml"
    targets.write_text(f"[[target]]\ncell = '{CELL}'\nratio = 2.0\nroofline_pct = 55.0\n")
    readme = tmp_path / "README.md"
    readme.write_text(f"{TABLE_BEGIN}\n{TABLE_END}\n{BEGIN}\n{END}\n")
    args = ["bench", "--table", "--perf-file", str(perf), "--targets", str(targets), "--write", str(readme)]
    assert main(args) == 0
    assert "not met: ratio needs +5.3%" in readme.read_text()
    targets.write_text("[[target]]\ncell = 'x'\n")
    before = readme.read_text()
    assert main(args) == 2
    assert "missing field 'ratio'" in capsys.readouterr().err and readme.read_text() == before


def test_the_readme_tables_are_the_rows_regenerated():
    """Neither README table is typed by hand: each equals what `bench --table --targets` writes from the committed
    rows (after new rows are appended, the command is rerun; this fails until it is)."""
    from bw24.engine.perf.jsonl import read_rows
    from bw24.engine.perf.table import replace_section

    text = (ROOT / "README.md").read_text()
    rows = read_rows(ROOT / "benchmarks" / "perf.jsonl")
    targets = load_targets(ROOT / "benchmarks" / "targets.toml")
    assert replace_section(text, render_table(rows)) == text
    assert replace_section(text, render_targets(rows, targets), BEGIN, END) == text
    first = text[text.index(BEGIN):].splitlines()[3]  # canary: the first target's line typed over
    typed = text.replace(first, first.replace(" | ", " | 9,999.9 (typed) | ", 1), 1)
    assert typed != text and replace_section(typed, render_targets(rows, targets), BEGIN, END) == text
