"""Model files of the cells: synth presets are written once with bw24-gguf's synth (the code behind
`bw24-gguf synth PRESET OUT --quant Q`) into a cache folder; anything else is a model alias/path
resolved by bw24.gguf.resolve_model, whose dominant weight type must match the cell's quant."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from .cells import Cell
from .errors import CellsFileError

SYNTH_SEED = 1
DEFAULT_CACHE = Path(".cache") / "bw24-bench"  # under the repo root; .cache/ is git-ignored


def cache_dir(explicit: str | Path | None = None) -> Path:
    return Path(explicit or os.environ.get("BW24_BENCH_CACHE") or DEFAULT_CACHE)


def dominant_qtype(f) -> str:
    """The weight type holding the most bytes among 2-D/3-D tensors (q4_k for a Q4_K_M file)."""
    c: Counter[str] = Counter()
    for t in f.tensors.values():
        if len(t.shape) >= 2:
            c[t.qtype.name.lower()] += int(t.nbytes)
    return c.most_common(1)[0][0] if c else "none"


def model_path(cell: Cell, cache: Path, log=print) -> Path:
    from bw24.gguf.synth import MIXES, PRESETS

    if cell.model in PRESETS:
        if cell.quant not in MIXES:
            raise CellsFileError(f"cell {cell.id}: quant {cell.quant!r} is not a synth mix ({', '.join(MIXES)})")
        name = f"{cell.model}{f'-{cell.layers}l' if cell.layers else ''}-{cell.quant}-s{SYNTH_SEED}.gguf"
        path = cache / name
        if not path.is_file():
            from bw24.gguf.synth import synth

            cache.mkdir(parents=True, exist_ok=True)
            log(f"bench: synthesizing {path} (bw24-gguf synth {cell.model} --quant {cell.quant}"
                f"{f' --layers {cell.layers}' if cell.layers else ''} --seed {SYNTH_SEED})")
            synth(cell.model, path, mix=cell.quant, seed=SYNTH_SEED, n_layer=cell.layers)  # atomic (tmp + rename)
        return path
    if cell.layers:
        raise CellsFileError(f"cell {cell.id}: 'layers' applies only to synth presets, not {cell.model!r}")
    from bw24.gguf import GGUFFile, resolve_model

    path = Path(resolve_model(cell.model))
    if cell.quant != "native":
        dom = dominant_qtype(GGUFFile(path))
        if not cell.quant.startswith(dom):
            raise CellsFileError(f"cell {cell.id}: {path.name} is mostly {dom}, not {cell.quant} (use quant = \"native\")")
    return path
