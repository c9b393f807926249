"""The committed cells file holds the issue's cells; bad cells files fail with typed errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from bw24.engine.perf.cells import load_cells, select_cells
from bw24.engine.perf.errors import CellsFileError, NoCellsSelectedError

REPO = Path(__file__).resolve().parents[3]


def test_committed_cells_cover_issue_5():
    ids = {c.id for c in load_cells(REPO / "benchmarks" / "cells.toml")}
    for m in ("qwen3-0.6b", "qwen3-8b", "qwen3-30b-a3b", "qwen3-32b"):
        for d in (0, 4096):
            assert f"{m}-q4_k_m-tg128@d{d}" in ids
        for n in (512, 4096):
            assert f"{m}-q4_k_m-pp{n}@d0" in ids
    for q in ("q8_0", "q4_0"):
        assert {f"qwen3-8b-{q}-tg128@d0", f"qwen3-8b-{q}-tg128@d4096", f"qwen3-8b-{q}-pp512@d0"} <= ids
    assert "smollm2-135m-q4_1-tg128@d0" in ids


def _write(tmp_path, body: str) -> Path:
    p = tmp_path / "cells.toml"
    p.write_text(body)
    return p


@pytest.mark.parametrize("body, match", [
    ('[[cell]]\nmodel = "qwen3-tiny"\nquant = "q8_0"\nmode = "decoding"\n', "mode 'decoding'"),
    ('[[cell]]\nmodel = "qwen3-tiny"\nmode = "decode"\n', "quant"),
    ('[[cell]]\nmodel = "qwen3-tiny"\nquant = "q8_0"\nmode = "decode"\ntokens = 0\n', "tokens"),
    ('[[cell]]\nmodel = "qwen3-tiny"\nquant = "q8_0"\nmode = "decode"\ndepht = 4\n', "unknown field"),
    ('[[cell]]\nmodel = "qwen3-tiny"\nquant = "q8_0"\nmode = "decode"\n' * 2, "same cell"),
    ("[[cell]\n", "not valid TOML"),
    ("x = 1\n", "no \\[\\[cell\\]\\]"),
])
def test_bad_cells_files(tmp_path, body, match):
    with pytest.raises(CellsFileError, match=match):
        load_cells(_write(tmp_path, body))


def test_missing_cells_file(tmp_path):
    with pytest.raises(CellsFileError, match="does not exist"):
        load_cells(tmp_path / "nope.toml")


def test_select_cells_globs_and_substrings(tmp_path):
    cells = load_cells(_write(tmp_path, "".join(
        f'[[cell]]\nmodel = "qwen3-tiny"\nquant = "q8_0"\nmode = "{m}"\ndepth = {d}\ntokens = 8\n'
        for m in ("decode", "prefill") for d in (0, 16))))
    assert [c.id for c in select_cells(cells, "*tg8@d16")] == ["qwen3-tiny-q8_0-tg8@d16"]
    assert [c.id for c in select_cells(cells, "pp8")] == ["qwen3-tiny-q8_0-pp8@d0", "qwen3-tiny-q8_0-pp8@d16"]
    assert len(select_cells(cells, None)) == 4
    with pytest.raises(NoCellsSelectedError, match="matches none"):
        select_cells(cells, "qwen3-8b*")
