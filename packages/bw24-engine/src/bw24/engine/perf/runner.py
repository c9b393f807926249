"""Time one cell on the engine: load, warm up (kernel compile and graph capture happen there, not in
the timed reps), then one timed repetition per call of rep(), so reps can interleave with another
engine's (A B A B). Figures: decode or prefill tok/s, bytes/token and % of the decode roofline,
kernels per token (counted where the backend launches through CudaOps._launch), peak VRAM (cuda).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .cells import Cell
from .roofline import Ceiling
from .traffic import decode_traffic

SPEC_PROMPT = ("def squares(xs):\n    out = []\n    for x in xs:\n        out.append(x * x)\n    return out\n\n"
               "def cubes(xs):\n    out = []\n    for x in xs:\n        out.append(x * x * x)\n    return out\n")
SPEC_PROMPT_MAX = 256  # tokens of the spec prompt at depth 0


@dataclass
class CellResult:
    cell: Cell
    samples: list[float]                  # tok/s of each timed rep (the cell's headline figure)
    bytes_per_token: int | None = None
    kernels_per_token: int | None = None
    vram_peak_bytes: int | None = None
    acceptance: float | None = None
    tokens_per_round: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def median(self) -> float:
        return float(statistics.median(self.samples))


def count_launches(ops, fn: Callable[[], None]) -> int | None:
    """Kernel launches made by fn through the backend's single launch point, or None when the
    backend has none to count (the NumPy reference). cuBLAS/CuPy-internal kernels are not counted."""
    launch = getattr(ops, "_launch", None)
    if launch is None:
        return None
    n = 0

    def counting(*a, **kw):
        nonlocal n
        n += 1
        return launch(*a, **kw)

    ops._launch = counting  # instance attribute shadows the method for this call only
    try:
        fn()
        ops.synchronize()
    finally:
        del ops._launch
    return n


class VramPeak:
    """Device memory used (total - free) above what was used before the engine loaded, sampled
    after load and after every rep; None on the CPU."""

    def __init__(self, backend: str) -> None:
        self.on = backend == "cuda"
        self.base = self._used() if self.on else 0
        self.peak = 0

    @staticmethod
    def _used() -> int:
        import cupy

        free, total = cupy.cuda.runtime.memGetInfo()
        return int(total) - int(free)

    def sample(self) -> None:
        if self.on:
            self.peak = max(self.peak, self._used() - self.base)

    @property
    def value(self) -> int | None:
        return self.peak if self.on else None


class CellBench:
    """One cell on one engine. warmup() once, then rep() -> tok/s as many times as wanted."""

    def __init__(self, cell: Cell, path: Path, backend: str, *, max_batch: int | None = None) -> None:
        from ..engine import Engine

        self.cell, self.path, self.backend = cell, path, backend
        self.vram = VramPeak(backend)
        ctx0 = max(cell.depth, SPEC_PROMPT_MAX) if cell.mode == "spec" else cell.depth
        n_ctx = ctx0 + cell.tokens + 8 + (cell.k + 1 if cell.mode == "spec" else 0)
        self.eng = Engine.load(path, backend=backend, n_ctx=n_ctx, max_batch=max_batch, progress=False)
        self.model, self.ops = self.eng.model, self.eng.ops
        self.vram.sample()
        v = self.model.cfg.n_vocab
        rng = np.random.default_rng(0)
        self.ids = [int(i) for i in rng.integers(min(10, v - 1), v, cell.depth + cell.tokens + 1)]
        self.kernels: int | None = None
        self._run = None

    # ---- decode ---------------------------------------------------------------------------------
    def _decode_setup(self) -> None:
        from ..graph import decode_lag, decode_step
        from ..sampling import SamplingParams

        m = self.model
        m.kv.reset()
        self.base = max(self.cell.depth, 1)  # depth 0 still needs one token to decode after
        m.feed(self.ids[: self.base])
        self.token = m.buf.view(1).ids
        self.ops.sample(m.buf.logits[0], SamplingParams(), m.kv.pos, out=self.token)
        self._step = decode_step(m, SamplingParams())
        self.lag = decode_lag()
        self._run = self.ops.capture(self._step, keys=lambda: m.kv.n_past)  # (BW24_ATTN_DEPTH's class)

    def _decode_rep(self) -> float:
        """The generation loop's way (generate.py): the host reads every token, step n + 1 queued before it waits
        for token n (BW24_DECODE_LAG=0: it waits for each token first, as llama-bench does)."""
        from ..graph import StepQueue

        m, ops = self.model, self.ops
        m.kv.reset(self.base)
        ops.synchronize()
        q = StepQueue(m, self._run)
        t = time.perf_counter()
        q.run_steps(self.cell.tokens, self.lag)
        return self.cell.tokens / (time.perf_counter() - t)

    def _count_decode_kernels(self) -> int | None:
        """Launches of one decode step, counted eagerly in the depth class its graph runs in (CudaOps.attn_class_of):
        outside one, a G = 8 model's attention counted both of its kernels where the graph launches one."""
        from contextlib import nullcontext

        self.model.kv.reset(self.base)
        self.model.kv.reserve(1)
        cls = getattr(self.ops, "attn_class_of", None)
        with cls(self.model.kv.n_past) if cls else nullcontext():
            return count_launches(self.ops, self._step)

    # ---- prefill --------------------------------------------------------------------------------
    def _prefill_rep(self) -> float:
        m, d = self.model, self.cell.depth
        m.kv.reset(min(d, m.kv.n_past))
        if m.kv.n_past < d:
            m.feed(self.ids[:d])
        self.ops.synchronize()
        t = time.perf_counter()
        m.feed(self.ids[d: d + self.cell.tokens])  # returns host logits: synchronized
        return self.cell.tokens / (time.perf_counter() - t)

    # ---- speculative ----------------------------------------------------------------------------
    def _spec_setup(self) -> None:
        from ..spec import DraftModelDrafter, NgramDrafter, SpecDecoder
        from ..spec.draft_model import twin_model

        c = self.cell
        if c.drafter == "self":  # draft = target: the same weights, its own KV (one upload, one stream)
            drafter = DraftModelDrafter(twin_model(self.model))
        else:
            drafter = NgramDrafter()
        self.dec = SpecDecoder(self.model, drafter, k=c.k)
        p = self.eng.tokenizer.encode(SPEC_PROMPT, add_special=True)
        want = c.depth or min(len(p), SPEC_PROMPT_MAX)  # depth 0: the prompt as it is (capped)
        self.prompt = (p * (want // max(len(p), 1) + 1))[:want]

    def _spec_rep(self) -> float:
        self.model.kv.reset()
        list(self.dec.generate(self.prompt, self.cell.tokens))
        st = self.dec.stats
        self.spec_stats = (st.acceptance, st.tokens_per_round)
        return st.decode_tok_s

    # ---- the protocol ---------------------------------------------------------------------------
    def warmup(self) -> None:
        mode = self.cell.mode
        if mode == "decode":
            self._decode_setup()
            self._decode_rep()  # first call eager (compile, size scratch), second captures
            self._decode_rep()
            self.kernels = self._count_decode_kernels()
        elif mode == "prefill":
            self._prefill_rep()  # with prefill graphs (the default) a one-chunk cell's first
            self._prefill_rep()  # chunk runs eagerly and its second captures, as decode's steps do
        else:
            self._spec_setup()
            self._spec_rep()
        self.vram.sample()

    def rep(self) -> float:
        fn = {"decode": self._decode_rep, "prefill": self._prefill_rep, "spec": self._spec_rep}[self.cell.mode]
        v = fn()
        self.vram.sample()
        return v

    def result(self, samples: list[float], ceiling: Ceiling) -> CellResult:
        c = self.cell
        r = CellResult(c, samples, kernels_per_token=self.kernels, vram_peak_bytes=self.vram.value)
        # The KV element is an engine setting (BW24_KV_DTYPE), not part of the cell: each row says which ran.
        r.extra["kv_dtype"] = np.dtype(getattr(self.model.kv.k[0], "dtype", np.float32)).name
        # opt-in paths on for this run (BW24_ATTN_FUSE, BW24_NORM_FUSE, ...): a row with other ones is another
        # variant of the cell, with its own baseline (perf/baseline.py) and table line
        r.extra["opt_in"] = list(getattr(self.eng.ops, "opt_in", lambda: [])())
        if c.mode == "decode":  # the loop's lag (rows written before 2026-12-07 carry none: they ran lag 0)
            r.extra["decode_lag"] = self.lag
            if self.lag == 0:
                r.extra["opt_in"].append("decode_lag_0")
        if c.mode != "prefill":
            kv_elem = np.dtype(r.extra["kv_dtype"]).itemsize
            tr = decode_traffic(self.eng.gguf, self.model.cfg, c.depth, c.tokens, kv_elem)
            r.bytes_per_token = tr.total
            r.extra.update(weight_bytes_per_token=tr.weight_bytes, kv_bytes_per_token=tr.kv_bytes)
        if c.mode == "spec":
            r.acceptance, r.tokens_per_round = self.spec_stats
        return r


def interleave(a: Callable[[], float], b: Callable[[], float] | None, reps: int) -> tuple[list[float], list[float]]:
    """A B A B ...: one rep of each per round, so drift (clocks, heat) hits both alike."""
    return interleave_blocks(a, None if b is None else (lambda n: [b() for _ in range(n)]), reps, 1)


def interleave_blocks(a: Callable[[], float], b: Callable[[int], list[float]] | None, reps: int,
                      block: int) -> tuple[list[float], list[float]]:
    """Blocks of `block` reps, A's then B's (B takes a count and returns that many samples):
    block = 1 is interleave() (A B A B); a larger block trades interleaving for fewer B processes."""
    if block < 1:
        raise ValueError(f"block {block} (must be >= 1)")
    xs: list[float] = []
    ys: list[float] = []
    while len(xs) < reps:
        n = min(block, reps - len(xs))
        xs.extend(a() for _ in range(n))
        if b is not None:
            ys.extend(b(n))
    return xs, ys
