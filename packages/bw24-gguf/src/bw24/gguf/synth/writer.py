"""Write a synthetic GGUF fast: the header through gguf.GGUFWriter, then every tensor generated in
row chunks by a process pool, each chunk pwrite()n at its final offset in a pre-sized file.

Chunk k of tensor t is drawn from default_rng([seed, t, k]): the file is identical for any worker count.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES

from ..reader import GGUFFile
from .plan import TensorPlan, arch_kvs, plan_tensors
from .presets import PRESETS, Preset
from .quantize.blocks import random_tensor_bytes
from .quantize.mix import MIXES
from .vocab import add_kvs, builtin_vocab, donor_vocab

CHUNK_BYTES = 32 << 20
_FD: int | None = None  # per worker process


@dataclass(frozen=True)
class SynthResult:
    path: Path
    seconds: float
    nbytes: int
    n_tensors: int
    n_vocab: int


def _pad(x: int, n: int) -> int:
    return (x + n - 1) // n * n


def _row_bytes(t: TensorPlan) -> int:
    block, tsize = GGML_QUANT_SIZES[t.qtype]
    return t.shape[-1] // block * tsize


def _gen(t: TensorPlan, rng: np.random.Generator, n_rows: int) -> np.ndarray:
    n = n_rows * t.shape[-1]
    if t.kind == "norm":  # F32 values near 1
        return (1.0 + rng.uniform(-t.sigma, t.sigma, n)).astype(np.float32).view(np.uint8)
    return random_tensor_bytes(rng, t.qtype, n, t.sigma)


def _init_worker(path: str) -> None:
    global _FD
    _FD = os.open(path, os.O_WRONLY)


def _write_chunk(task) -> int:
    t, seed, ti, ci, row0, n_rows, offset = task
    data = _gen(t, np.random.default_rng([seed, ti, ci]), n_rows)
    view = memoryview(data)
    done = 0
    while done < len(view):  # pwrite may write less than asked for large buffers
        done += os.pwrite(_FD, view[done:], offset + row0 * _row_bytes(t) + done)
    return len(view)


def synth(preset: str | Preset, out: str | os.PathLike[str], mix: str = "q4_k_m", seed: int = 0,
          donor: str | os.PathLike[str] | None = None, n_layer: int | None = None,
          workers: int | None = None, progress: bool = False, mtp: int = 0) -> SynthResult:
    """Write a GGUF with `preset`'s shapes, random well-formed weights and a real tokenizer
    (mtp: number of NextN/MTP blocks to append; llama.cpp loads such files only for archs with NextN)."""
    t0 = time.perf_counter()
    p = PRESETS[preset] if isinstance(preset, str) else preset
    if mix not in MIXES:
        raise ValueError(f"unknown quant mix {mix!r}; choose one of {', '.join(MIXES)}")
    if n_layer is not None:
        p = p.with_layers(n_layer)
    if donor is not None:
        dfile = GGUFFile(donor)
        n_vocab = max(p.n_vocab, len(dfile.get("tokenizer.ggml.tokens") or []))
        vocab = donor_vocab(dfile, n_vocab)
    else:
        n_vocab = p.n_vocab
        vocab = builtin_vocab(n_vocab)
    tensors = plan_tensors(p, mix, n_vocab, mtp)

    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    w = GGUFWriter(str(tmp), p.arch)
    add_kvs(w, arch_kvs(p, mix, n_vocab, seed, mtp) + vocab)
    for t in tensors:
        nbytes = _row_bytes(t) * int(np.prod(t.shape[:-1], dtype=np.int64))
        if t.qtype in (Q.F32, Q.F16):
            w.add_tensor_info(t.name, t.shape, np.dtype(np.float32 if t.qtype == Q.F32 else np.float16), nbytes)
        else:
            w.add_tensor_info(t.name, (*t.shape[:-1], _row_bytes(t)), np.dtype(np.uint8), nbytes, raw_dtype=t.qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    data_start = _pad(w.fout[0].tell(), w.data_alignment)
    w.close()

    tasks, offset = [], data_start
    for ti, t in enumerate(tensors):
        rb = _row_bytes(t)
        rows = int(np.prod(t.shape[:-1], dtype=np.int64))
        step = max(1, CHUNK_BYTES // rb)
        for ci, r0 in enumerate(range(0, rows, step)):
            tasks.append((t, seed, ti, ci, r0, min(step, rows - r0), offset))
        offset += _pad(rb * rows, w.data_alignment)
    os.truncate(tmp, offset)  # zero padding everywhere; data lands at its offsets

    tasks.sort(key=lambda x: -x[5] * _row_bytes(x[0]))  # big chunks first: better load balance
    workers = workers or os.cpu_count() or 1
    total = 0
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=offset - data_start, unit="B", unit_scale=True, desc=f"synth {p.name}")
    if workers == 1 or offset - data_start < 4 * CHUNK_BYTES:
        _init_worker(str(tmp))
        try:
            for task in tasks:
                total += _write_chunk(task)
                if bar:
                    bar.update(total - bar.n)
        finally:
            os.close(_FD)
    else:
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
        with ctx.Pool(min(workers, len(tasks)), initializer=_init_worker, initargs=(str(tmp),)) as pool:
            for n in pool.imap_unordered(_write_chunk, tasks):
                total += n
                if bar:
                    bar.update(n)
    if bar:
        bar.close()
    os.replace(tmp, out)
    return SynthResult(out, time.perf_counter() - t0, offset, len(tensors), n_vocab)
