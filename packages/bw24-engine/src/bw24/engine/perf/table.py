"""The README's table of cells, regenerated from perf.jsonl (never typed by hand): the latest row of
each device+cell (and opt-in variant: the KV column names its opt-ins), between `<!-- perf-table:begin -->` and `<!-- perf-table:end -->`."""

from __future__ import annotations

from pathlib import Path

from .baseline import headline, kv_name, variant
from .errors import TableMarkersError

BEGIN = "<!-- perf-table:begin -->"
END = "<!-- perf-table:end -->"
HEADER = ("| cell | bw24 tok/s | llama.cpp tok/s | ratio | % roofline | KV | peak VRAM GiB bw24 / llama.cpp | date "
          "| GPU | commit |\n|---|---|---|---|---|---|---|---|---|---|")


def _num(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, int | float) else "—"


def _gib(v) -> str:
    return _num(v / 2**30 if isinstance(v, int | float) else None, ".2f")


def render_table(rows: list[dict], device: str | None = None) -> str:
    latest: dict[tuple[str, str, tuple[str, ...]], dict] = {}
    for r in rows:
        if device is None or r.get("device") == device:
            latest[(r.get("device", "?"), r.get("cell", "?"), variant(r))] = r  # file order: later rows win
    lines = [HEADER]
    for (dev, cell, opt), r in sorted(latest.items()):
        llama = r.get("llama") or {}
        commit = str(r.get("git", "?"))[:7] + ("+" if r.get("dirty") else "")
        if llama.get("build_commit"):
            commit += f" / llama.cpp {llama['build_commit']}"
        lines.append(f"| {cell} | {_num(headline(r), ',.1f')} | {_num(r.get('llama_tok_s'), ',.1f')} | "
                     f"{_num(r.get('ratio'), '.2f')}{'x' if r.get('ratio') else ''} | "
                     f"{_num(r.get('roofline_pct'), '.1f')} | {kv_name(r)}{''.join(f' +{o}' for o in opt if not o.startswith('kv_'))} | "
                     f"{_gib(r.get('vram_peak_bytes'))} / "
                     f"{_gib(llama.get('vram_peak_bytes'))} | {str(r.get('time', '?'))[:10]} | {dev} | {commit} |")
    if len(lines) == 1:
        lines.append("| (no rows yet) | | | | | | | | | |")
    return "\n".join(lines) + "\n"


def replace_section(text: str, table: str, begin: str = BEGIN, end: str = END) -> str:
    """text with the part between the begin and end marker lines replaced by table (the markers stay)."""
    b, e = text.find(begin), text.find(end)
    if b < 0 or e < 0 or e < b:
        raise TableMarkersError(f"the file needs the lines {begin} and {end} (in that order) around the table")
    return text[: b + len(begin)] + "\n" + table + text[e:]


def write_sections(path: str | Path, sections: dict[tuple[str, str], str]) -> None:
    """Each (begin, end) marker pair's section of the file replaced by its body, in one write: every pair of
    markers present, or nothing changes."""
    p = Path(path)
    if not p.is_file():
        raise TableMarkersError(f"--write: {p} does not exist")
    text = p.read_text()
    for (begin, end), body in sections.items():
        text = replace_section(text, body, begin, end)
    p.write_text(text)


def write_table(path: str | Path, rows: list[dict], device: str | None = None) -> None:
    write_sections(path, {(BEGIN, END): render_table(rows, device)})
