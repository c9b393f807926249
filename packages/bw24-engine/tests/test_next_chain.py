"""benchmarks/next_chain.txt, the next H200 session's stages, and next_chain_h100.txt, the chain for an H100 that
comes in its place, checked here: a typo there costs device minutes (a stage the driver does not know, a perf cell
that matches no cell, a variable never read)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bw24.engine.perf.cells import load_cells

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "packages/bw24-engine/benchmarks"


def _stages(text: str) -> list[str]:
    return [s.strip() for s in text.splitlines() if s.strip() and not s.lstrip().startswith("#")]


def _labels() -> set[str]:
    """The stage names h200_session.sh's case statement knows."""
    body = (BENCH / "h200_session.sh").read_text().split("case $STAGE in", 1)[1]
    return {m for line in re.findall(r"^\s{2}([a-z0-9|]+)\)", body, re.M) for m in line.split("|")}


def stage_problems(st: str, words: list[str], labels: set[str], cell_ids: list[str], env_names: set[str]) -> list[str]:
    bad = []
    while words and words[0] == "with":  # with VAR=VALUE STAGE ...
        var = words[1].split("=")[0] if len(words) > 1 else ""
        if "=" not in (words[1] if len(words) > 1 else "") or var not in env_names:
            bad.append(f"{st}: {var or '?'} is read nowhere")
        words = words[2:]
    if not words or words[0] not in labels:
        bad.append(f"{st}: unknown stage {words[0] if words else ''!r}")
    elif words[0] == "par":  # par A ARGS , B ARGS + C ARGS: every sub-stage checked as a stage
        sub: list[str] = []
        for w in [*words[1:], "+"]:
            if w in (",", "+"):
                bad += stage_problems(st, sub, labels, cell_ids, env_names) if sub else [f"{st}: an empty sub-stage"]
                sub = []
            else:
                sub.append(w)
    elif words[0] in ("perf", "ab"):  # perf CELLS / ab ROUNDS CELLS VARIANT...
        cells = words[1] if words[0] == "perf" else (words[2] if len(words) > 2 else "")
        for pat in cells.split(","):
            if sum(pat in c for c in cell_ids) != 1:
                bad.append(f"{st}: {pat!r} does not name exactly one cell")
        if words[0] == "ab":
            if not words[1].isdigit() or len(words) < 5:
                bad.append(f"{st}: ab takes ROUNDS CELLS and two or more variants")
            for v in words[3:]:
                for kv in ([] if v == "-" else v.split("+")):
                    if "=" not in kv or kv.split("=")[0] not in env_names:
                        bad.append(f"{st}: {kv.split('=')[0]!r} is read nowhere")
    return bad


def variant_problems(text: str, parse_change) -> list[str]:
    """The `variant` stages' changes parse (table_variant.parse_change), and every `BW24_TUNING_DIR=/tmp/r/tables/NAME`
    names a variant an earlier stage writes (else the ab stage stops on a missing table after the device minutes
    before it)."""
    bad, made = [], set()
    for st in _stages(text):
        words = st.split()
        if words[0] == "variant":
            made.add(words[1] if len(words) > 1 else "")
            changes = [w for w in words[2:] if not w.startswith("--")]
            if "--bare" in words[2:]:  # the built-in defaults under this GPU's key: no change to parse, none allowed
                bad += [f"{st}: --bare takes no changes"] if changes else []
                continue
            for spec in changes or ["(none)"]:
                try:
                    parse_change(spec)
                except ValueError as e:
                    bad.append(f"{st}: {e}")
        for m in re.findall(r"BW24_TUNING_DIR=/tmp/r/tables/([^\s+/]+)", st):
            if m not in made:
                bad.append(f"{st}: no earlier `variant {m}` stage writes /tmp/r/tables/{m}")
    return bad


def chain_problems(text: str, labels: set[str], cell_ids: list[str], env_names: set[str]) -> list[str]:
    return [p for st in _stages(text) for p in stage_problems(st, st.split(), labels, cell_ids, env_names)]


def _env_names() -> set[str]:
    # (the workbench notebooks too: the `wb` stage runs them, BW24_WB_* picks what they sweep)
    src = "\n".join(p.read_text() for d in ("packages", "workbench") for p in (ROOT / d).rglob("*.py"))
    return set(re.findall(r"\bBW24_[A-Z0-9_]+", src))


@pytest.mark.parametrize("name", ["next_chain.txt", "next_chain_h100.txt"])
def test_next_chain_names_known_stages_cells_and_variables(helpers, name):
    ids = [c.id for c in load_cells(ROOT / "benchmarks/cells.toml")]
    text = (BENCH / name).read_text()
    assert len(_stages(text)) >= 5
    assert chain_problems(text, _labels(), ids, _env_names()) == []
    assert variant_problems(text, helpers.bench_module("table_variant").parse_change) == []


def test_chain_check_catches_a_typo():
    """Canary: a misspelt stage, a cell that matches none (or two), an unknown variable are each named."""
    ids = ["qwen3-8b-q4_k_m-tg128@d0", "qwen3-8b-q4_k_m-tg128@d4096"]
    text = "kc\nperff x\nperf qwen3-8b-q4_k_m-tg128@d0\nperf tg128\nperf qwen3-9b\nwith BW24_NOPE=1 kc\n"
    got = chain_problems(text, {"kc", "perf"}, ids, {"BW24_PDL"})
    assert len(got) == 4 and "perff" in got[0] and "'tg128'" in got[1] and "qwen3-9b" in got[2] and "BW24_NOPE" in got[3]
    # par: its sub-stages are checked alike (a typo in one of them, an empty one)
    got = chain_problems("par kc + kcc , perf qwen3-8b-q4_k_m-tg128@d0\npar kc + , kc\n", {"kc", "perf", "par"}, ids,
                         set())
    assert len(got) == 2 and "'kcc'" in got[0] and "empty" in got[1]
    # ab: its cells, its round count, its variants' variables
    got = chain_problems("ab 2 qwen3-8b-q4_k_m-tg128@d0 - BW24_PDL=0+BW24_NOPE=1\nab x tg128 -\n", {"ab"}, ids,
                         {"BW24_PDL"})
    assert len(got) == 3 and "BW24_NOPE" in got[0] and "'tg128'" in got[1] and "ROUNDS" in got[2]


def test_variant_check_catches_a_bad_change_and_a_table_never_written(helpers):
    """Canary: a change the tool would refuse, and an ab on a variant no earlier stage writes (or one written only
    after it), are each named; a variant written first passes."""
    parse = helpers.bench_module("table_variant").parse_change
    ok = "variant w Q4_K:4096x4096:rows=8\nab 2 x - BW24_TUNING_DIR=/tmp/r/tables/w\n"
    assert variant_problems(ok, parse) == []
    got = variant_problems("variant w Q4_K:4096x4096:rows=3\nab 2 x - BW24_PDL=0+BW24_TUNING_DIR=/tmp/r/tables/v\n"
                           "variant v Q4_K:4096x4096:rows=8\n", parse)
    assert len(got) == 2 and "rows=3" in got[0] and "variant v" in got[1]
    # --bare (the built-in defaults): no change to parse; one given beside it, or no change and no --bare, is named
    assert variant_problems("variant b --bare\nab 2 x - BW24_TUNING_DIR=/tmp/r/tables/b\n", parse) == []
    got = variant_problems("variant b --bare Q4_K:4096x4096:rows=8\nvariant c\n", parse)
    assert len(got) == 2 and "--bare takes no changes" in got[0] and "(none)" in got[1]


def test_with_names_its_folder_by_a_paths_last_part(tmp_path):
    """h200_session.sh's `with VAR=/a/b/NAME STAGE`: the stage's logs under $R/VAR_NAME, one folder that
    ingest_evidence.py reads (at e223fb5 the whole path made nested folders it skipped); a plain value as before."""
    import subprocess

    script = BENCH / "h200_session.sh"
    body = script.read_text().split("  with)", 1)[1].split(";;", 1)[0]
    cmd = body.split("\n")[-1].split("; shift")[0].strip()
    assert cmd.startswith('export "$1" BW24_R=')
    for value, want in (("BW24_TUNING_DIR=/tmp/r/tables/w32", "BW24_TUNING_DIR_w32"), ("BW24_PDL=0", "BW24_PDL_0"),
                        ("BW24_ATTN_DECODE=32:66", "BW24_ATTN_DECODE_32:66")):
        out = subprocess.run(["bash", "-c", f'set -- "{value}"; R={tmp_path}; {cmd}; echo "$BW24_R"'],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == f"{tmp_path}/{want}"
