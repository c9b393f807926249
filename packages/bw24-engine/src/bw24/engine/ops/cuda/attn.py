"""Decode/verify attention launch (kernels/attention.cu: attn_split<D, DV, G, CH> + attn_combine), which
also leaves the output's int8 quantization for a q8 output projection (one quantize_x launch fewer).

Split geometry: CH keys per split unit (a template constant) and at most `max_splits` splits (the
grid's y size; x is the kv head, so the live low splits are scheduled before the dead ones). The
kernel picks the keys per split from the live range alone (p = pos + t), so a row's arithmetic never
depends on T: speculative verify rows equal decode rows bit for bit, and one launch shape serves
every position (graph replay). Both come from the tuning table's
"attention" / "decode" default ({"chunk": CH, "max_splits": n[, "fuse_combine": 0|1]}) when present,
else the defaults below.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ...errors import UnsupportedModelError
from . import q8
from .kernels import ATTN_CHUNKS, kv_arg  # CH values CI compiles (tuning-table choices)
from .weights import NULL

ATTN_CHUNK = 32  # CH: short contexts get one latency round of 32 keys per block (4 warps x 8 keys)
BLOCKS_PER_SM = 4  # long contexts: ~4 blocks of 4 warps per SM, each streaming 16-byte K/V loads


@functools.cache
def _sm_count() -> int:
    import cupy as cp

    return int(cp.cuda.Device().attributes["MultiProcessorCount"])


def default_max_splits(units: int, n_sm: int) -> int:
    """Enough blocks to cover the GPU ~4 times at T = 1 in one wave, and bounded partials. units: the grid's
    blocks a split, kv heads x their default head groups (split_units): a kv head's 8 q heads in two blocks of 4
    (the 32B, the 30B-A3B) count twice. Until ba03fa3 the kv heads alone counted, so the 32B's d4096 grid was 8
    x 2 x 66 = 1,056 blocks, two waves of 4 blocks an SM; at 33 splits (528 blocks, one wave of blocks twice
    as long) its d4096 token ran 123.4 tok/s against 119.0 at 66 (both at 4 blocks an SM) and 116.5 on the
    defaults of the session (evidence/perf_h200_ba03fa3_attn_min_blocks_4_attn_decode_32x33.log)."""
    return max(16, min(256, math.ceil(BLOCKS_PER_SM * n_sm / units)))


ATTN_SPACE = {"chunk": list(ATTN_CHUNKS), "max_splits": [16, 33, 66, 132],  # workbench/tune_attention.py
              "fuse_combine": [0, 1]}


# q heads a block takes when a kv head has more (CudaOps.attn_split_heads, the default; BW24_ATTN_SPLIT_HEADS=0: off): the
# synthetic qwen3-30b-a3b's (and qwen3-32b's) 8 q heads a kv head ran 8.5 us a layer in attn_split at 64
# keys against the 0.6B's 3.4 us for 2 (a6dcfe3, BW24_PDL=0 profile): each warp's round is G x KB dot
# products in series. Two blocks of 4 each read the kv head's keys (the second from L2, as they run side by
# side) and halve that chain; each head's arithmetic is unchanged, so are its bits.
# BW24_ATTN_BLOCK_HEADS=N (CudaOps.attn_block_heads: 1, 2 or 4, the default) sets the q heads a block (opt-in
# until measured): at 390f819 the d4096 token cost 7.7 / 12.7 / 23 us a layer more than the d0 one on the
# 0.6B / 8B / 32B (2 / 4 / 2 x 4 q heads a block) for the same 16.8 MB of K/V a layer: the per-block chain of
# dot products, not HBM, sets the time at depth, so fewer heads a block (more blocks reading the same keys,
# from L2) may shorten it. The bits stay those of one block a kv head.
SPLIT_HEADS = 4
BLOCK_HEADS = (1, 2, 4)  # the values BW24_ATTN_BLOCK_HEADS takes
MIN_BLOCKS = range(1, 7)  # attn_split's blocks an SM BW24_ATTN_MIN_BLOCKS (and BW24_ATTN_DEPTH's third field) take


# The depth classes in force when BW24_ATTN_DEPTH is unset (and no single geometry is forced, CudaOps.__init__):
# measured on the H200 at ba03fa3 against the defaults of the same session, faster on every cell it ran: the 8B's
# d0 470.1 tok/s against 456.4 (+3.0%) and d4096 381.0 / 380.7, the 30B-A3B's d0 448.3 / 434.7 (+3.1%), the 32B's
# d0 142.1 / 141.4 and d4096 119.0 / 116.5 (+2.1%) (evidence/perf_h200_ba03fa3_attn_depth_1024x2x4.log).
# One q head a block up to 1,024 keys (1024:1:4) since the H200 run at e223fb5 (bw24 alone, 2 rounds interleaved,
# evidence/perf_ab_h200_e223fb5.log): with BW24_ATTN_PIPE (now the default too) the d0 token +8.5% (0.6B), +3.4%
# (8B), +4.4% (30B-A3B) against 1024:2:4 without it; alone +6.7% / +2.3% / +3.9%. Why: the short class (one split up
# to 256 keys) runs 2-8 rounds of 32 keys in series in each block, and one head a block halves each round's dot
# products while the blocks (more of them, reading the same keys from L2) run side by side.
DEPTH_DEFAULT = "1024:1:4"


@dataclass(frozen=True)
class AttnDepth:
    """BW24_ATTN_DEPTH=KEYS:HEADS:MIN_BLOCKS (CudaOps.attn_depth; DEPTH_DEFAULT when unset, 0 off): a decode step whose cache holds at most
    KEYS keys runs the attention with HEADS q heads a block; a deeper one with the configured heads a block
    (4 by default) and attn_split built for MIN_BLOCKS blocks an SM (attention.cu ATTN_MIN_BLOCKS). Each class
    is its own captured graph (CudaOps.capture with the step's keys). Why: on the H200 two blocks of 2 heads made
    the d0 token 3.5% / 3.8% / 1.3% faster on the 8B / 30B-A3B / 32B and the 32B's d4096 one 2.5% slower
    (1653f1f); 4 blocks an SM made the d4096 token 2.1% / 1.6% faster on the 8B / 32B and the 8B's d0 one 1.6%
    slower (5b56e32): each wins at one depth. Every head's arithmetic is the same in either geometry, so are the
    bits (kernel-check's block-heads and min-blocks cases): a step's tokens do not depend on its class."""

    keys: int
    heads: int
    min_blocks: int

    @classmethod
    def parse(cls, text: str | None) -> AttnDepth | None:
        """None for empty or 0 (one geometry at every depth); else the three fields, or ValueError naming the
        variable."""
        if not text or text == "0":
            return None
        parts = text.split(":")
        if (len(parts) != 3 or not all(p.isdigit() for p in parts) or int(parts[0]) < 1
                or int(parts[1]) not in BLOCK_HEADS or int(parts[2]) not in MIN_BLOCKS):
            raise ValueError(f"BW24_ATTN_DEPTH={text!r}: use KEYS:HEADS:MIN_BLOCKS (KEYS >= 1 cache keys; HEADS one "
                             f"of {', '.join(map(str, BLOCK_HEADS))}, q heads a block up to KEYS; MIN_BLOCKS 1..6, "
                             f"attn_split's blocks an SM past KEYS), e.g. 2048:2:4, or 0 (off; unset: {DEPTH_DEFAULT})")
        return cls(*(int(p) for p in parts))

    @property
    def label(self) -> str:
        """The perf rows' variant name."""
        return f"attn_depth_{self.keys}x{self.heads}x{self.min_blocks}"


def depth_in_force(env: str | None, single: bool) -> AttnDepth | None:
    """The depth classes for BW24_ATTN_DEPTH's value env (None: unset). Unset, DEPTH_DEFAULT, unless `single`: an
    opt-in (BW24_ATTN_BLOCK_HEADS, _MIN_BLOCKS, _FILL) forces one geometry, which a class would override at one of
    the two depths."""
    return AttnDepth.parse(("" if single else DEPTH_DEFAULT) if env is None else env)


def head_groups(G: int, split: bool, per: int = SPLIT_HEADS) -> int:
    """Blocks a kv head's G q heads are spread over (attn_split's grid.x = Hkv * head_groups): per q heads a
    block when split and G is a larger multiple of per, else one block."""
    return G // per if split and G > per and G % per == 0 else 1


# A model of few kv heads with many q heads each (the real pair: qwen2.5-coder-0.5b's 2 kv heads of 7 q heads,
# the 1.5b's 2 of 6) gets few attention blocks (one block of 7, three of 2) and a long chain of dot products in
# each: one q head a block. On the H200 at eae1eee (BW24_ATTN_BLOCK_HEADS=1, one geometry at every depth) the 1.5b
# decoded 931-950 tok/s against 882-892 on the defaults, the 0.5b 748-970 against 727-858, and the pair's
# speculative runs 472 / 558 / 606 tok/s against 444 / 511 / 558 (evidence/spec_bench_h200_eae1eee_pair
# {_attn_block_heads,}.txt); the bits are those of one block a kv head (kernel-check's block-heads cases).
# CudaOps.attn_few_kv: on unless BW24_ATTN_BLOCK_HEADS is set (that value then, at every depth, as before).
FEW_KV_HEADS = 2
MANY_Q_HEADS = 6


def block_heads_of(cu, hkv: int | None = None, G: int | None = None) -> int:
    """The q heads a block of this backend when its kv heads' are split (CudaOps.attn_block_heads; backends
    without the setting: SPLIT_HEADS); with the model's shape (hkv kv heads of G q heads) one for few kv heads
    of many q heads (FEW_KV_HEADS, MANY_Q_HEADS, why there) where CudaOps.attn_few_kv says so."""
    if (hkv is not None and G is not None and getattr(cu, "attn_few_kv", False)
            and hkv <= FEW_KV_HEADS and G >= MANY_Q_HEADS):
        return 1
    return getattr(cu, "attn_block_heads", None) or SPLIT_HEADS


def split_units(hkv: int, G: int) -> int:
    """The grid's blocks a split at the default head groups (SPLIT_HEADS q heads a block). From the model's
    shape alone, never from BW24_ATTN_BLOCK_HEADS / _SPLIT_HEADS or a depth class: the split count sets the
    partials' summation, so every geometry of one model keeps the same bits."""
    return hkv * head_groups(G, True)


def _config(tuning, override: dict | None) -> dict:
    """The attention.decode config in force: the table's entry with a workbench override's keys on top.
    An override that names only some keys (kernel_check's {"fuse_combine": 1}) keeps the table's others,
    so it changes what it names and nothing else (the geometry, hence the partials' bits)."""
    table = (tuning.config("attention", "decode") if tuning is not None else None) or {}
    return {**table, **(override or {})}


def attn_geometry(tuning, S: int, hkv: int, n_sm: int | None = None, override: dict | None = None, *,
                  group: int = 1, mma: bool = False) -> tuple[int, int]:
    """(CH, grid splits ns) for a cache of S keys and hkv kv heads of `group` q heads each; `mma`: a model whose
    deep rows take the tensor-core pass 1 (dec_mma_from), DEC_MMA_SPLITS or the table's "mma_splits" unless
    max_splits is forced. Never a function of T or of the depth class (bit-identical rows). `override`: a config
    forced by a workbench sweep or BW24_ATTN_DECODE (CudaOps.set_launch_config("attention", ...))."""
    cfg = _config(tuning, override)
    ch = cfg.get("chunk", ATTN_CHUNK)
    ch = ch if ch in ATTN_CHUNKS else ATTN_CHUNK  # a table entry outside the compiled set: default
    maxs = cfg.get("max_splits")
    if mma and "max_splits" not in (override or {}):
        maxs = cfg.get("mma_splits", DEC_MMA_SPLITS)
    if not isinstance(maxs, int) or maxs < 1:
        maxs = default_max_splits(split_units(hkv, group), n_sm if n_sm is not None else _sm_count())
    return ch, max(1, min(math.ceil(S / ch), maxs))


def fuse_combine(tuning, override: dict | None = None) -> bool:
    """Pass 2 inside attn_split (its last live split per kv head and token combines) instead of an
    attn_combine launch: the same bits, one launch per layer fewer. Off unless the tuning table (or a
    workbench override) says {"fuse_combine": 1}. tune_attention on the H200 (ddfc1fd, the 8B's 32/8 heads)
    never picked it at contexts 512..32768, so the committed table leaves it off."""
    return _config(tuning, override).get("fuse_combine") == 1


def plan_chunk(tuning, n_ctx: int, hkv: int, n_sm: int | None = None) -> int:
    """A chunk for memory.plan whose ceil(n_ctx / chunk) bounds the grid splits from above (group 1: the most
    splits any group gives)."""
    _, ns = attn_geometry(tuning, n_ctx, hkv, n_sm)
    return max(1, n_ctx // ns)


DEC_MMA_DIMS = (64, 128)  # D = Dv that attention_dec_mma.cu's fragments take (multiples of 32 <= 128, compiled)
DEC_MMA_ALL = -1  # CudaOps.attn_dec_mma for BW24_ATTN_DEC_MMA=all: every row on tensor cores, no attn_split launch
# BW24_ATTN_DEC_MMA unset: models with DEC_MMA_MIN_G or more q heads a kv head run rows past DEC_MMA_KEYS live keys
# on tensor cores (CudaOps._attention_policy), through the cp.async pipe (CudaOps.attn_dec_pipe) over DEC_MMA_SPLITS
# splits; the others every row on attn_split. Why: on the H200 at 5107205, the d4096 tokens against the defaults of
# the same session (then: G = 8 alone on tensor cores, 66 splits, no pipe): the 8B (G = 4) 410.7 / 385.9 tok/s
# (+6.4%), the 30B-A3B (8) 387.3 / 370.6 (+4.5%), the 0.6B (2) 1,016.2 / 1,004.2 (+1.2%), the 32B (8) 123.3 / 124.2
# (-0.7%; +0.7% at a431903); the 30B-A3B's and smollm2's gates past 1,024 keys MATCHed with it, and kernel-check's
# pipe cases were the plain kernel's bits (evidence/perf_h200_5107205*.log). The attention alone (gpu_attn_sweep.py):
# 33 splits with the pipe was the fastest setting of the 32B, 30B-A3B and 8B at 4,096 and 16,384 keys. Before
# (eae1eee) without the pipe, at 66 splits, the 8B had lost 0.6% and the 0.6B 6.2%: a 64-key tile of few q heads'
# rows is mostly empty, and a split of one tile leaves nothing to overlap. Shallow rows (<= 1,024 keys) keep
# attn_split either way: DEC_MMA=all lost 6-12% at d0. G = 1 (no grouped heads) was never measured: off.
DEC_MMA_MIN_G = 2
DEC_MMA_KEYS = 1024
# The grid's splits where the tensor-core pass 1 applies (attn_geometry's mma): two or more 64-key tiles a split at
# 4,096 keys, so the pipe has a next tile to fetch; a table's "mma_splits" (or a forced "max_splits") over it.
DEC_MMA_SPLITS = 33


def dec_mma_default(n_head: int, n_head_kv: int) -> int:
    """CudaOps.attn_dec_mma for a model when BW24_ATTN_DEC_MMA is unset (the comment above: why)."""
    return DEC_MMA_KEYS if n_head_kv > 0 and n_head // n_head_kv >= DEC_MMA_MIN_G else 0


def dec_mma_from(cu, k_cache, D: int, Dv: int, G: int, fused: bool) -> int | None:
    """BW24_ATTN_DEC_MMA's KEYS for this call (CudaOps.attn_dec_mma): rows with more live keys take pass 1 on
    tensor cores (attention_dec_mma.cu), the others attn_split; 0 for `all` (every row); None: every row on
    attn_split. Only where the mma kernel has the case: a float16 cache, D = Dv in DEC_MMA_DIMS (multiples of 32:
    a row's only split writes the output a warp a 32-dim group, as attn_split's), G <= 8, and pass 2 as its own
    launch (attn_combine). Why: kernels/attention_dec_mma.cu."""
    v = int(getattr(cu, "attn_dec_mma", 0) or 0)
    ok = v != 0 and not fused and k_cache.dtype == np.float16 and D == Dv and D in DEC_MMA_DIMS and G <= 8
    return (0 if v == DEC_MMA_ALL else v) if ok else None


DEC_MMA_TILE = 64  # keys a tile of attention_dec_mma.cu (DM_KT)
def dec_pipe_smem(D: int, Dv: int) -> int:
    """Dynamic shared memory attn_dec_mma takes with BW24_ATTN_DEC_PIPE (CudaOps.attn_dec_pipe): two stages of a
    64-key tile's K and V rows of float16, each row padded by 8 halves (attention_dec_mma.cu's KP, VP)."""
    return 2 * DEC_MMA_TILE * ((D + 8) + (Dv + 8)) * 2


def dec_mma_launches(cu, frm: int | None, T: int, window) -> tuple[bool, bool]:
    """(attn_split, attn_dec_mma) launches a call with BW24_ATTN_DEC_MMA needs. Each returns at once for the
    other's rows, so a launch is skipped where it has no row: with `all` (frm 0) attn_split; inside a depth class
    (CudaOps._attn_class: cu.attn_class) a shallow one (cache keys <= depth.keys <= KEYS) has no mma row, a deep
    one with one token and no window (its row has the cache's keys > depth.keys >= KEYS) no attn_split row.
    Outside a class, both."""
    if frm is None:
        return True, False
    if frm == 0:
        return False, True
    cls, depth = getattr(cu, "attn_class", None), getattr(cu, "attn_depth", None)
    if depth is None or cls is None:
        return True, True
    if cls == "shallow":
        return True, depth.keys > frm
    return not (T == 1 and not window and depth.keys >= frm), True


def attention(cu, q, k_cache, v_cache, pos, *, scale, softcap, window, out) -> None:
    T, H, D = q.shape
    Hkv, S, Dv = v_cache.shape
    G = H // Hkv
    assert H % Hkv == 0 and k_cache.shape == (Hkv, S, D) and out.shape == (T, H, Dv)
    assert all(a.flags.c_contiguous for a in (q, k_cache, v_cache, out))
    if D % 32 or Dv % 32 or D > 256 or Dv > 256 or G > 8:
        raise UnsupportedModelError(f"cuda attention: head dims {D}/{Dv} with {G} q heads per kv head")
    tuning, override = getattr(cu.qmv_configs, "tuning", None), getattr(cu, "attn_override", None)
    forced = getattr(cu, "attn_fuse", None)  # BW24_ATTN_FUSE over the table; a workbench override over both
    if forced is None and getattr(cu, "attn_short_fused", False):
        forced = True  # the short class's step (CudaOps._step_class): every row one split, no attn_combine launch
    if forced is not None:
        override = {"fuse_combine": int(forced), **(override or {})}
    fused = fuse_combine(tuning, override)
    frm = dec_mma_from(cu, k_cache, D, Dv, G, fused)
    # with the tensor-core pass 1 one block a kv head (all its q heads) and DEC_MMA_SPLITS splits (the 32B's d4096:
    # 8 x 33 = 264 blocks); rows of up to 32 x ns keys split the same at any ns (chunks of 32), so the shallow rows
    # keep their bits whichever count a model takes
    ch, ns = attn_geometry(tuning, S, Hkv, override=override, group=1 if frm is not None else G, mma=frm is not None)
    rows = out.reshape(T, H * Dv)
    # decode/verify rows feeding a q8 output projection (q8.feeds_q8, as rmsnorm decides for its
    # consumers): the kernel writing the output also writes its int8 quantization, so the wo matmul
    # skips its quantize_x launch.
    # CudaOps.attn_q8: on by default (BW24_ATTN_Q8=0 turns it off; why: the comment there). With the fused
    # pass 2, its last split block quantizes what it combined.
    quant = getattr(cu, "attn_q8", False) and q8.feeds_q8(cu, rows)
    xq, xs = q8.buffers(cu, T, H * Dv) if quant else (NULL, NULL)
    ml = cu._buf("attn_ml", T * H * ns * 2)  # sized by the first eager call, outside graph capture
    acc = cu._buf("attn_acc", T * H * ns * Dv)
    # per (token, kv head, head group), zeroed once and re-armed by the kernel (sized for 16 rows of 8 kv heads
    # first)
    hg = head_groups(G, getattr(cu, "attn_split_heads", False), block_heads_of(cu, Hkv, G))
    Gb = G // hg  # q heads a block
    tickets = cu._buf("attn_tickets", max(T, 16) * max(Hkv, 8) * hg, np.int32, zeroed=True) if fused else NULL
    w = np.int32(window or 0)
    kt = kv_arg(k_cache, v_cache)  # a half KV cache: attn_split<..., __half>
    name = f"attn_split<{D},{Dv},{Gb},{ch}{kt}>"
    run_split, run_mma = dec_mma_launches(cu, frm, T, window)
    if run_split:  # (with frm: built to return for the rows over frm live keys)
        extra = (("BW24_ATTN_DEC_MMA", frm),) if frm else ()
        cu._launch(cu._k_with("attention.cu", name, extra), (Hkv * hg, ns, T), 128,
                   (q, k_cache, v_cache, pos, np.int32(H), np.int32(Hkv), np.int32(S), np.float32(scale),
                    np.float32(softcap or 0.0), w, np.int32(ns), ml, acc, out, tickets, xq, xs))
    if run_mma:  # the rows over frm live keys: pass 1 on tensor cores, every kv head's G q heads in one block
        cu._launch(cu._k("attention_dec_mma.cu", f"attn_dec_mma<{D},{Dv},{G},{ch}>"), (Hkv, ns, T), 128,
                   (q, k_cache, v_cache, pos, np.int32(H), np.int32(Hkv), np.int32(S), np.float32(scale),
                    np.float32(softcap or 0.0), w, np.int32(ns), np.int32(frm), ml, acc, out, xq, xs),
                   shared_mem=dec_pipe_smem(D, Dv) if getattr(cu, "attn_dec_pipe", False) else 0)
    if fused:  # every row's pass 2 done inside pass 1
        if quant:
            q8.mark_ready(cu, rows)
        return
    block = max(32, min(256, 32 * math.ceil(Dv / 32)))  # == Dv (D, Dv % 32 == 0, <= 256): one dim per thread
    cu._launch(cu._k("attention.cu", "attn_combine"), (H, T), block,
               (ml, acc, pos, np.int32(H), np.int32(Dv), np.int32(ch), np.int32(ns), w, out, xq, xs))
    if quant:
        q8.mark_ready(cu, rows)


__all__ = ["ATTN_CHUNK", "ATTN_CHUNKS", "ATTN_SPACE", "BLOCK_HEADS", "DEC_MMA_DIMS", "FEW_KV_HEADS", "MANY_Q_HEADS", "DEPTH_DEFAULT",
           "DEC_MMA_ALL", "DEC_MMA_KEYS", "DEC_MMA_MIN_G", "DEC_MMA_SPLITS", "DEC_MMA_TILE",
           "dec_mma_default", "dec_pipe_smem", "dec_mma_from", "dec_mma_launches", "depth_in_force", "SPLIT_HEADS", "attention",
           "attn_geometry", "block_heads_of", "fuse_combine", "head_groups", "plan_chunk",
           "split_units"]
