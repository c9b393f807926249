"""`bw24-gguf inspect`: architecture, hyperparameters, the tensor table and totals per type."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from rich.console import Console
from rich.table import Table

from .config import ModelConfig
from .errors import UnsupportedArchitectureError
from .reader import GGUFFile


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def inspect_file(path: str, console: Console | None = None, max_tensors: int | None = None) -> None:
    console = console or Console()
    f = GGUFFile(path)
    console.print(f"[bold]{f.path}[/bold]  GGUF v{f.version}  arch=[cyan]{f.arch}[/cyan]  "
                  f"name={f.get('general.name', '?')!r}  tensors={len(f.tensors)}")
    hp = Table(title="hyperparameters (ModelConfig)", show_header=True)
    hp.add_column("field")
    hp.add_column("value")
    try:
        cfg = ModelConfig.from_gguf(f)
        for fld in dataclasses.fields(cfg):
            v = getattr(cfg, fld.name)
            if fld.name == "swa_layers":
                v = "".join("S" if s else "G" for s in v) + "  (S sliding, G global)"
            hp.add_row(fld.name, str(v))
    except UnsupportedArchitectureError as e:
        hp.add_row("(not supported)", str(e))
        for k in f.keys():
            if k.startswith(f"{f.arch}."):
                hp.add_row(k, str(f.get(k)))
    console.print(hp)
    tok = f.get("tokenizer.ggml.model")
    if tok:
        console.print(f"tokenizer: model={tok} pre={f.get('tokenizer.ggml.pre')} "
                      f"n_tokens={len(f.get('tokenizer.ggml.tokens') or [])} "
                      f"bos={f.get('tokenizer.ggml.bos_token_id')} eos={f.get('tokenizer.ggml.eos_token_id')}")

    tt = Table(title="tensors", show_header=True)
    for col, just in (("name", "left"), ("type", "left"), ("shape", "right"), ("bytes", "right")):
        tt.add_column(col, justify=just)
    per_type: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    items = list(f.tensors.values())
    for i, t in enumerate(items):
        s = per_type[t.qtype.name]
        s[0] += 1
        s[1] += t.n_elements
        s[2] += t.nbytes
        if max_tensors is None or i < max_tensors:
            tt.add_row(t.name, t.qtype.name, "x".join(map(str, t.shape)), f"{t.nbytes:,}")
    if max_tensors is not None and len(items) > max_tensors:
        tt.add_row(f"... {len(items) - max_tensors} more", "", "", "")
    console.print(tt)

    tot = Table(title="totals per type", show_header=True)
    for col in ("type", "tensors", "elements", "bytes", "bits/weight"):
        tot.add_column(col, justify="left" if col == "type" else "right")
    all_n = all_b = 0
    for name, (n, el, b) in sorted(per_type.items(), key=lambda kv: -kv[1][2]):
        tot.add_row(name, str(n), f"{el:,}", _human(b), f"{8 * b / max(el, 1):.2f}")
        all_n += el
        all_b += b
    tot.add_row("[bold]all[/bold]", str(len(items)), f"{all_n:,}", _human(all_b), f"{8 * all_b / max(all_n, 1):.2f}")
    console.print(tot)
