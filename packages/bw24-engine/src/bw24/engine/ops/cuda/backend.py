"""CudaOps: the ops interface (ops/base.py) on CuPy RawKernels from kernels/*.cu.

Every op asserts shapes/dtypes and launches into the caller's buffers on one non-default stream;
nothing here reads a device value on the host, so a decode step can be captured as one CUDA graph
(capture()). Prefill matmuls (T > 16) dequantize the weight to fp16 in bounded row chunks and use
cuBLAS GemmEx (ops/cuda/prefill.py), outside any graph; prefill attention is a flash-style kernel.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from typing import Any

import numpy as np
from bw24.runtime.launch import SMEM_DEFAULT_LIMIT, allow_dynamic_shared

from ...errors import UnsupportedModelError
from ..base import ACTIVATIONS, ROPE_MODES, Ops, check_qk_norm
from . import attn as _attn
from . import norm as _norm
from . import prefill as _prefill
from .kernels import ATTN_SHAPES, QMV_NT, get_kernel, kv_elem, names_macro
from .launch import DRAFT_Q8_MIN_K, Q8_MIN_K, Q8_MIN_K_DEFAULT, QMV_SPACE, TUNING_DIR_ENV, QmvConfigs
from .prefill import PRECISIONS
from .q8 import QMV8_LOADS
from .repack import UnsupportedWeightError
from .weights import NULL, QWeight, upload_weight

ATTN_CHUNK = _attn.ATTN_CHUNK  # keys per split unit of the decode attention (ops/cuda/attn.py)


def _i32(v) -> np.int32:
    return np.int32(v)


def kv_dtype_from_env() -> Any:
    """The KV-cache element: float16 (llama.cpp's default: half the attention bytes at depth) unless
    BW24_KV_DTYPE=f32. f16 was made the default after the H200 gates at 5dd78dc / this commit: run-gen
    MATCH on smollm2 and the synthetic 8B, verify rows bit-identical to decode, the GPU pytest green
    (docs/h200-log.md "Decode and prefill figures by commit")."""
    from ...kv_cache import kv_dtype

    return kv_dtype(os.environ.get("BW24_KV_DTYPE", "f16"), "BW24_KV_DTYPE")


def spec_k_cap_of(env: str | None) -> int:
    """BW24_SPEC_K_MAX's value (None: QMV_NT's 8-row bucket less the verify's bonus row), refused outside 1..8."""
    if env is None:
        return QMV_NT[-2] - 1
    if not (env.isdigit() and 1 <= int(env) <= 8):
        raise ValueError(f"BW24_SPEC_K_MAX={env!r}: give the most K an adaptive speculative run grows to, 1..8 "
                         f"(unset: {QMV_NT[-2] - 1})")
    return int(env)


def _deep(depth, keys) -> bool:
    """A step over `keys` cache keys is in the deep class of BW24_ATTN_DEPTH's `depth` (None: no classes)."""
    return depth is not None and keys > depth.keys


def _check_switch(var: str, value: str, on: str, default_on: bool) -> None:
    """An on / off variable's value, 1 or 0; anything else a ValueError naming the variable, the value and both."""
    if value not in ("0", "1"):
        raise ValueError(f"{var}={value!r}: use 1 ({'the default: ' if default_on else ''}{on}) or 0 "
                         f"(off{'' if default_on else ', the default'})")


NORM_AHEAD_MAX_EMBD = 1024  # BW24_NORM_AHEAD unset: on up to this many hidden dims (CudaOps.norm_ahead_env, why)


class CudaOps(Ops):
    name = "cuda"
    verify_tolerance = 1e-2
    quantizes_activations = True  # the q8 matvec path (launch.default_path)

    def use_int8_activations(self, on: bool) -> None:
        """Off for mixture-of-experts models with BW24_MOE_Q8=0 (their default until 2c3a1bc): the router
        reads activations that int8 rounding has moved and near-tied experts flip (synthetic qwen3-30b-a3b
        on the H200: int8 decode NMSE 2.4e-3, prefill 9.9e-3 vs the gate's 2e-3 at a878d46, before the
        gate pinned the routing; docs/gates.md "The run-gen gate on int8-activation models"). Every matvec then takes the fp32-activation path but the
        vocabulary head (launch.QmvConfigs.f32_body), which feeds no router: on fp32 activations the
        30B-A3B's Q6_K head took 207 us a token for 255 MB (a6dcfe3), the 8B's q8 head 3.6 TB/s. The gate
        then names the head's rounding (rounded_paths: "int8-head")."""
        self.quantizes_activations = on
        self.qmv_configs.force_path = None
        self.qmv_configs.f32_body = not on

    def use_draft_policy(self) -> None:
        """This backend runs a speculative draft model (Engine.load(draft=True)): int8 activations at every K
        (launch.DRAFT_Q8_MIN_K, why there) unless BW24_DRAFT_Q8=0. Before the weights load: their paths follow it."""
        if self.draft_q8:
            self.qmv_configs.min_k = min(self.qmv_configs.min_k, DRAFT_Q8_MIN_K)

    def _activation_policy(self, cfg) -> None:
        """A mixture-of-experts model's matvecs on int8 activations as a dense model's, its experts too
        (BW24_MOE_Q8, the default since 2c3a1bc: ops/cuda/moe.py q8_experts, moe_gu8 / moe_down8). With
        BW24_MOE_Q8=0 they take fp32 activations (use_int8_activations(False)) unless BW24_MOE_Q8_ATTN=1: then
        its attention projections (its only quantized matvecs outside the experts; the router is an F32
        weight, never int8) take the q8 path. Either way the gate holds the model to the int8 half's bound,
        its routing pinned to the exact decode's (engine/routing_pin.py)."""
        if cfg.is_moe and not (self.moe_q8_attn or self.moe_q8):
            self.use_int8_activations(False)

    def _norm_policy(self, cfg) -> None:
        """BW24_NORM_AHEAD in force: the variable where set, else on for a dense model of at most NORM_AHEAD_MAX_EMBD
        hidden dims (the measurements at norm_ahead_env)."""
        if self.norm_ahead_env is not None:
            self.norm_ahead = self.norm_ahead_env == "1"
        else:
            self.norm_ahead = not cfg.is_moe and cfg.n_embd <= NORM_AHEAD_MAX_EMBD

    def _attention_policy(self, cfg) -> None:
        """The decode attention's tensor-core rows by the model's q heads a kv head when BW24_ATTN_DEC_MMA is unset
        (attn.dec_mma_default: 1,024 live keys for 2 or more, off for 1; the H200 figures at attn.DEC_MMA_MIN_G)."""
        if self.attn_dec_mma_env is None:
            self.attn_dec_mma = _attn.dec_mma_default(cfg.n_head, cfg.n_head_kv)

    @contextmanager
    def exact_activations(self):
        """Every matvec on the fp32-activation path, no int8 rounding of x in prefill and split (fp32-like)
        prefill products (the gate's exact half); eager calls only: a graph captured inside keeps the paths
        it was captured with."""
        old = self.qmv_configs.force_path, self.prefill_precision, self.prefill_graphs
        # (prefill graphs off: a replayed chunk would run the paths it was captured with)
        self.qmv_configs.force_path, self.prefill_precision, self.prefill_graphs = "f32", "split", False
        # The block's scratch is its own, dropped at the end as the gate's float32 cache is (Engine._exact_cache):
        # the split GEMMs' low halves and the host-planned experts' gathered rows are the gate's alone, and kept
        # they stayed in what the engine held for generation (the 30B-A3B's long gate: 0.81 GiB of scratch at
        # fb470bb, over gguf + KV + 1 GiB). Nothing captured holds them: the block's calls are eager.
        # The rope tables (norm.rope_table) live in the scratch too, and _rope_tabs records the positions built in
        # them: it goes with its scratch. Swapped with the scratch alone (2e5c4eb), the block found a table marked
        # built, took a fresh uninitialized array for it and never built it: the H200's GPU pytest at aee9d2f, the
        # MoE tiny model's exact half after its decode steps (NaN router logits, no expert picked, an illegal
        # address; evidence/pytest_gpu_h200_aee9d2f.log). Its own record in the block: it builds its own tables.
        outer = getattr(self, "_scratch", None)
        if outer is not None:
            self._scratch_outer = [*self._scratch_outer, outer]
            self._scratch, self._q8_ready = {}, None
            outer_tabs, self._rope_tabs = self._rope_tabs, {}
        try:
            yield
        finally:
            self.qmv_configs.force_path, self.prefill_precision, self.prefill_graphs = old
            if outer is not None:
                self._scratch, self._q8_ready, self._rope_tabs = outer, None, outer_tabs
                self._scratch_outer = self._scratch_outer[:-1]
                self._release_pool()  # the block's arrays back to the driver, not left cached in CuPy's pool

    @contextmanager
    def pin_routing(self, pin):
        """Ops.pin_routing with prefill graphs off: a replayed chunk would skip moe's host round trip to the
        pin (ops/cuda/moe.py pin_routes); decode steps outside the engine's graph runner are eager already."""
        old = self.prefill_graphs
        self.prefill_graphs = False
        try:
            with super().pin_routing(pin):
                yield
        finally:
            self.prefill_graphs = old

    emulating = False  # inside emulate_rounding()

    @contextmanager
    def emulate_rounding(self):
        """Inside exact_activations, the gate's "rounding alone" (Engine.verify_prefill): every matvec input
        that the backend's own forwards round to int8 is rounded so first (q8.round_x: the value its codes
        stand for, round_x_q8's own arithmetic), then taken by the exact half's fp32 kernels; none of the q8
        kernels run. Covers the q8 matvecs (their plan without the gate's force) and BW24_MOE_Q8's experts
        (their input and h: ops/cuda/moe.py). Yields the rounded_paths names it emulates."""
        old, self.emulating = self.emulating, True
        try:
            yield [p for p in self.rounded_paths() if p in ("int8-activation", "int8-head")]
        finally:
            self.emulating = old

    def _emulated(self, w, x):
        """x rounded as the q8 path would (a scratch copy) where emulate_rounding is on and the backend's
        own forward runs w on the q8 path; else x."""
        if not self.emulating or self.qmv_configs.plan(w.qtype, w.n, w.k, gate_force=False)[0] != "q8":
            return x
        return self._rounded_copy(x)

    def _rounded_copy(self, x):
        """x rounded as the q8 kernels see it (q8.round_x) into the emulation's scratch copy."""
        from . import q8

        return q8.round_x(self, x, out=self._buf("round_x", x.size).reshape(x.shape))

    def rounded_paths(self) -> list[str]:
        """Where this backend rounds beyond fp32 (the gate's report): with BW24_ATTN_DEC_MMA also the decode
        attention's float16 products (deep rows on a float16 cache; the exact half's float32 cache never takes
        them: attn.dec_mma_from)."""
        head = ["int8-head"] if self.qmv_configs.f32_body and not self.quantizes_activations else []
        return (super().rounded_paths() + head + (["fp16-prefill"] if self.prefill_precision == "fp16" else [])
                + (["fp16-decode-attention"] if self.attn_dec_mma else []))
    # Speculative verify: are batched rows (T <= 16) bit-identical to decode steps? A measured claim,
    # never assumed: `benchmarks/spec_bench.py OUT --cells exact` checks it on the device (re-run after
    # any matvec/attention/norm kernel change). Measured YES on the H200 at 4a5c2e7 (smollm2, T = 2..16,
    # max |diff| 0: evidence/spec_bench_h200_4a5c2e7.txt), and kernel_check's per-op "decode==verify
    # bitwise" cases (f32 and q8 matvecs, attention rows, norms, rope) are green there. run-spec's
    # self-consistency gate still catches any divergence. BW24_BATCH_ROWS_EXACT=0 turns it off for a run.
    batch_rows_exact = os.environ.get("BW24_BATCH_ROWS_EXACT", "1") != "0"
    # Attention writes its output's int8 quantization for a q8 wo (ops/cuda/attn.py), one quantize_x
    # launch per layer fewer. On by default since the H200 runs at cb58708 / 0dedbb8: kernel_check's
    # "+q8 out" cases green, run-gen MATCH, verify rows bit-identical; the 8B's decode step 2296 vs 2324
    # us and its 5-token verify 3726 vs 3943 us (evidence/profile_h200_0dedbb8_attn_q8.txt).
    # BW24_ATTN_Q8=0 turns it off (perf rows then record "no_attn_q8").
    attn_q8_env = os.environ.get("BW24_ATTN_Q8", "1") != "0"
    attn_q8 = attn_q8_env
    # Programmatic dependent launch inside captured graphs (bw24.runtime.launch, sm_90+): every kernel
    # of kernels/ opens with common.cuh's PDL_OPEN (launch_dependents, then wait: none writes or reads
    # another kernel's data before it), so the next kernel's launch overlaps this one's tail, and the
    # decode matvecs load their first weights before the wait. Eager launches keep CuPy's launch
    # (prefill is host-bound: ctypes packing costs more than it saves). On by default since the H200
    # run at 7df7bc1: kernel_check ALL GREEN, run-gen MATCH, GPU pytest green, 8B tg128 447.8 vs 429.0
    # tok/s (evidence/*7df7bc1_pdl*). BW24_PDL=0 turns it off (perf rows then record "no_pdl").
    pdl_env = os.environ.get("BW24_PDL", "1") != "0"
    # Prefill attention (T > 16 queries, a float16 cache) as tensor-core GEMMs through cuBLAS: scores,
    # a masked softmax kernel, probabilities times values (ops/cuda/attn_gemm.py). At 0d45897 on the H200
    # (kernel_check green, run-gen MATCH): the 8B's pp512 12240 vs 10632 tok/s, pp4096 10245 vs 5584; but
    # the host-bound 0.6B's pp512 16138 vs 18785 (its ~7 host calls per layer instead of 1 cost more than
    # the GPU time they save). BW24_ATTN_GEMM: "auto" (default) takes it for a query chunk with at least
    # attn_gemm.MIN_SCORES score elements (heads x queries x keys; between those two cells), "1" for every
    # chunk, "0" never (perf rows then record "attn_gemm" / "no_attn_gemm").
    attn_gemm_env = os.environ.get("BW24_ATTN_GEMM", "auto")
    attn_gemm = attn_gemm_env == "1"  # every chunk (kernel_check's GEMM cases set it)
    attn_gemm_auto = attn_gemm_env not in ("0", "1")
    # Prefill attention from a float16 cache in one tensor-core flash kernel (ops/cuda/attn_mma.py,
    # kernels/attention_mma.cu: float16 q and probabilities, float32 sums). BW24_ATTN_MMA: "auto" (default)
    # takes it in place of the GEMM path, for the chunks where the GEMM rule above would (one launch instead
    # of ~7 host calls and no score matrix); "1" for every chunk, "0" never (perf rows record "attn_mma" /
    # "no_attn_mma"). H200 at a6dcfe3 (kernel_check's ten mma cases green, run-gen MATCH; perf rows
    # "+attn_mma" ran it for every chunk): the 8B's pp512 16,605 tok/s, pp4096 14,324 (GEMM path at
    # ca80b31: 14,338 / 11,292), the 0.6B's pp4096 21,585 (22,180); but the 0.6B's pp512, whose chunk is
    # below the GEMM rule's size and runs the CUDA-core flash kernel by default, 16,294 against 28,723.
    attn_mma_env = os.environ.get("BW24_ATTN_MMA", "auto")
    attn_mma = attn_mma_env == "1"  # every chunk (kernel_check's mma cases set it)
    attn_mma_auto = attn_mma_env == "auto"
    # The mma kernel's keys in splits where a chunk has too few row tiles to fill the GPU (attn_mma.split_plan,
    # merged by attn_mma_combine). The default since the H200 run at b6232b5 (kernel-check's 8 split cases
    # green, the GPU test's planted merge bug red): the 0.6B's pp4096 in 512-token chunks 66,452 tok/s with
    # it, 52,650 without (1.56x / 1.23x llama.cpp), its pp512 96,256 / 91,205; the 8B's cells unchanged
    # (17,494 / 17,404 pp512, 14,739 / 14,808 pp4096). BW24_ATTN_MMA_SPLIT=0 turns it off (perf rows
    # "no_attn_mma_split").
    attn_mma_split = os.environ.get("BW24_ATTN_MMA_SPLIT", "1") != "0"
    # Attention's pass 2 inside attn_split's last split block (ops/cuda/attn.py fuse_combine: one
    # attn_combine launch per layer fewer, the same bits), now with the output's int8 quantization too.
    # The tuning table leaves it off (tune_attention at ddfc1fd timed it eagerly, before PDL and graphs of
    # the whole step); BW24_ATTN_FUSE=1 / 0 forces it on / off for a run (rows record "attn_fuse" /
    # "no_attn_fuse"). Forced on at ca80b31 (+ int8 rows): slower, the 8B 437.1 vs 470.4, the 0.6B 1091 vs 1128.
    attn_fuse_env = os.environ.get("BW24_ATTN_FUSE")
    attn_fuse = None if attn_fuse_env is None else attn_fuse_env == "1"
    # The decode / verify attention's dot products summed across the warp G * KB at a time (attention.cu
    # warp_sum_many: each lane keeps half of its values at each butterfly step; the 8B's round takes 63
    # shuffles instead of 160, the same bits). At depth 4096 the attention was ~2x llama.cpp's cost a token
    # (the 8B: 553 vs 281 us, ca80b31). BW24_ATTN_SUMS=1; perf rows record "attn_sums". Opt-in until measured.
    attn_sums = os.environ.get("BW24_ATTN_SUMS", "0") == "1"
    # The decode / verify attention's next round of K / V loads issued before this round's math
    # (attention.cu RawRow; the same rows, order and bits): at depth 4096 the 8B's attention streamed its
    # cache at about a third of the bandwidth (553 us a token against llama.cpp's 281 at ca80b31), each
    # warp waiting on its round's loads before any math. The default since the H200 run at e223fb5 (bw24 alone, 2
    # rounds, evidence/perf_ab_h200_e223fb5.log): the d0 token +1.0% / +1.3% / +1.9% (0.6B / 8B / 30B-A3B) alone, and
    # with the depth classes' one q head a block (attn.DEPTH_DEFAULT) +8.5% / +3.4% / +4.4% where that alone gave
    # +6.7% / +2.3% / +3.9%. BW24_ATTN_PIPE=0 turns it off (perf rows "no_attn_pipe").
    attn_pipe = os.environ.get("BW24_ATTN_PIPE", "1") != "0"
    # Attention's pass 2 (attn_combine, and the fused last split block) with its loop over the splits
    # unrolled 32 instead of 8 (attention.cu BW24_COMBINE_UNROLL: more partial loads in flight, the same
    # arithmetic in the same order, the same bits). The default since the H200 run at b6232b5 (kernel-check's
    # "attn combine32 == combine8 bitwise" cases green): at depth 4096 the 0.6B 884.7 tok/s with it, 795.2
    # without, the 8B 377.1 / 371.9 (the table's 33 splits); at 66 splits (the table's since) 905.9 / 383.5.
    # BW24_ATTN_COMBINE32=0 turns it off (perf rows "no_attn_combine32").
    attn_combine32 = os.environ.get("BW24_ATTN_COMBINE32", "1") != "0"
    # Contexts of at most N live keys in one decode / verify attention split whose block writes the output
    # (attention.cu BW24_ATTN_SHORT; attn_combine returns at once), instead of 32-key splits and pass 2: at 64
    # keys the 0.6B's attn_combine took 3.8 us a layer beside attn_split's 3.5, the 30B-A3B's 3.75 beside
    # 4.9 (6e0baa5, BW24_PDL=0 profiles). A row's split still depends on its position only (verify == decode
    # bit for bit); other bits than the split rule's for 33..N keys. BW24_ATTN_SHORT=N (a multiple of 32 up
    # to 1024; 0 off), perf rows "attn_short_N" for another N, "no_attn_short" for 0.
    # Its class (capture): a step over at most N cache keys is its own graph, whose attention runs pass 2 inside
    # attn_split (attn.fuse_combine's path; every row there is one split writing its output, so no attn_combine
    # launch at all). Why: alone, the one split saved no time (390f819: the empty combine's launch stayed); with
    # BW24_ATTN_FUSE=1 as well the 8B's d0 gained 2.8% and the 0.6B's 2.4% (00a5378, bw24 alone, 3 rounds) but
    # the fused pass 2 cost ~15% at depth 4096, where the rows have many splits: so the fused pass 2 in this
    # class alone. A one-split row's output is the same arithmetic either way (attn_chunk.cuh merge_warps_store),
    # so a row's bits do not depend on its step's class. BW24_ATTN_FUSE=0 / 1 still forces one choice everywhere.
    # N = 256 the default since the H200 run at 30ecafb (evidence/perf_ab_h200_30ecafb*, perf_h200_30ecafb*): bw24
    # alone, 3 rounds interleaved, d0 +1.9% (8B), +1.4% (0.6B), +3.9% (30B-A3B), +4.1% (smollm2), the 0.6B's d4096
    # (deep steps, no short class) -0.6%; beside llama.cpp d0 +2.3% / +4.3% / +3.0% and the 32B's 143.9 either way;
    # its gates MATCH (smollm2, the 0.6B past 1,024 keys, the 8B, the 30B-A3B), draft = target PASS.
    attn_short_env = os.environ.get("BW24_ATTN_SHORT", "256")
    attn_short = 256  # the value __init__ checked
    attn_short_fused = False  # in the short class's step (_attn_class): attention with the fused pass 2
    # The most K an adaptive speculative run grows to (spec.runner, AdaptiveK's grow_to): K + 1 verify rows in the
    # 8-row matvec bucket (QMV_NT), K <= 7. A 9-row verify takes the 16-row bucket, whose launches cost 2.0-4.6x a
    # decode launch at the real pair's 1.5b's shapes against 1.7-3.0x for 8 rows (evidence/verify_sweep_h200_b6232b5
    # .log: the gate/up 17,920 x 1,536 Q4_K 44.3 vs 29.0 us); at eae1eee the pair's adaptive runs drafted ~8 a round,
    # a 9-row verify of ~2.9 target steps. BW24_SPEC_K_MAX=N (1..8) sets another (spec rows under its folder).
    spec_k_max_env = os.environ.get("BW24_SPEC_K_MAX")
    spec_k_cap = spec_k_cap_of(None)  # the value __init__ set
    # A draft model's matvecs on int8 activations at every K (use_draft_policy; launch.DRAFT_Q8_MIN_K, why there):
    # BW24_DRAFT_Q8=0 turns it off (perf / spec rows "no_draft_q8").
    draft_q8 = os.environ.get("BW24_DRAFT_Q8", "1") != "0"
    # A kv head's 8 q heads (the 30B-A3B, the 32B) over two decode / verify attention blocks of 4
    # (ops/cuda/attn.py head_groups; the same bits). The default since the H200 run at e7b99ea (kernel-check's
    # split == one block cases green): the 30B-A3B's d0 decode 301.5 tok/s with it, 282.9 without, in one
    # session (llama.cpp 304.7 / 306.7). BW24_ATTN_SPLIT_HEADS=0 turns it off (perf rows "no_attn_split_heads").
    attn_split_heads = os.environ.get("BW24_ATTN_SPLIT_HEADS", "1") != "0"
    # q heads a block when a kv head's are split (ops/cuda/attn.py BLOCK_HEADS, why there): BW24_ATTN_BLOCK_HEADS
    # = 1, 2 or 4 (the default); perf rows "attn_block_heads_N" for the others. One geometry at every depth: 2
    # is +3.0% / +3.5% on the 8B's / 30B-A3B's d0 (ba03fa3) and -2.5% on the 32B's d4096 (1653f1f); the default
    # depth classes (BW24_ATTN_DEPTH) run 2 up to 1,024 keys.
    attn_block_heads_env = os.environ.get("BW24_ATTN_BLOCK_HEADS", "4")
    attn_block_heads = 4  # the value __init__ checked
    # one q head a block for models of few kv heads with many q heads each (ops/cuda/attn.py FEW_KV_HEADS, why
    # there): the default since eae1eee's H200 run; BW24_ATTN_BLOCK_HEADS set (any value) takes that one instead
    attn_few_kv = "BW24_ATTN_BLOCK_HEADS" not in os.environ
    # At shallow depth, up to N blocks share a decode / verify attention block's q heads, run by the split
    # blocks past the live range (attention.cu BW24_ATTN_FILL, why there; the grid and the bits unchanged):
    # BW24_ATTN_FILL = 1 (off, the default), 2, 4 or 8; perf rows "attn_fill_N". Opt-in: 4 moved nothing
    # (5b56e32); 2 was +2.1% / +1.8% on the 8B's / 30B-A3B's d0 and -2.7% / -3.8% on the 8B's / 0.6B's d4096
    # (ba03fa3), where the depth classes win on every cell.
    attn_fill_env = os.environ.get("BW24_ATTN_FILL", "1")
    attn_fill = 1  # the value __init__ checked
    # attn_split built to fit N blocks an SM (attention.cu ATTN_MIN_BLOCKS, why there: at 154 registers a thread
    # an SM holds 3, so the d4096 cells' 528 / 1,056 blocks ran in 2 / 3 waves; the same PTX, the same bits):
    # BW24_ATTN_MIN_BLOCKS = 1 (off, the default) .. 6; perf rows "attn_min_blocks_N". One geometry at every
    # depth: 4 is +2.1% / +1.6% on the 8B's / 32B's d4096 and -1.6% on the 8B's d0 (5b56e32); the default depth
    # classes (BW24_ATTN_DEPTH) build 4 past 1,024 keys.
    attn_min_blocks_env = os.environ.get("BW24_ATTN_MIN_BLOCKS", "1")
    attn_min_blocks = 1  # the value __init__ checked
    # The attention's geometry by the decode step's depth (ops/cuda/attn.py AttnDepth, why there): BW24_ATTN_DEPTH
    # = KEYS:HEADS:MIN_BLOCKS, one captured graph per class; perf rows "attn_depth_KEYSxHEADSxMIN_BLOCKS" for
    # another value, "no_attn_depth" for 0 (one geometry at every depth). The default since the H200 run at
    # ba03fa3 (attn.DEPTH_DEFAULT, the figures there); unset with BW24_ATTN_BLOCK_HEADS, _MIN_BLOCKS or _FILL
    # set, those set the one geometry instead.
    attn_depth_env = os.environ.get("BW24_ATTN_DEPTH")
    attn_depth = None  # the AttnDepth __init__ parsed
    attn_class = None  # "shallow" / "deep" while a depth class's step runs or is captured (_attn_class)
    # Decode / verify rows with more than N live keys take pass 1 on tensor cores (kernels/attention_dec_mma.cu,
    # why there; ops/cuda/attn.py dec_mma_from says where it applies): BW24_ATTN_DEC_MMA=N, a positive multiple of
    # 32, or `all` (every row; no attn_split launch); 0: off; perf rows "attn_dec_mma_N" / "no_attn_dec_mma".
    # Unset (the default): 1,024 for models of 2 or more q heads a kv head, off for the others (prepare_model's
    # _attention_policy; attn.DEC_MMA_MIN_G: the H200 figures). float16 products (kernel_check's gemm16 class),
    # so other bits than attn_split's for those rows; a row's path depends on its live keys alone, so verify rows
    # still equal decode rows.
    attn_dec_mma_env = os.environ.get("BW24_ATTN_DEC_MMA")
    attn_dec_mma = 0  # the value __init__ checked (until a model's policy sets its default)
    # That kernel's tiles through two stages of shared memory by cp.async, the next tile's copies in flight during
    # this one's math (attention_dec_mma.cu BW24_DEC_MMA_PIPE, why there; the same bits). On by default since
    # 5107205's figures (attn.DEC_MMA_MIN_G); BW24_ATTN_DEC_PIPE=0 turns it off (perf rows "no_attn_dec_pipe").
    attn_dec_pipe_env = os.environ.get("BW24_ATTN_DEC_PIPE", "1")
    attn_dec_pipe = attn_dec_pipe_env != "0"
    # With the pipe, a split's first two tiles of cache rows older than the step's tokens go out before the PDL wait
    # (attention_dec_mma.cu BW24_DEC_MMA_EARLY, why there; the pipe's bits). On by default since 73fcbc7's figures (the
    # d4096 cells: the 0.6B +5.8%, the 30B-A3B +2.8% with BW24_EARLY_LOADS beside it, measured without effect at d0,
    # the 8B +1.2%); BW24_ATTN_DEC_EARLY=0 turns it off (perf rows "no_attn_dec_early").
    attn_dec_early_env = os.environ.get("BW24_ATTN_DEC_EARLY", "1")
    attn_dec_early = attn_dec_early_env != "0"
    # Blocks an SM the tensor-core attention is built to fit (attention_dec_mma.cu DM_MIN_BLOCKS, why there; registers
    # and spills only, the same bits): 1..4; unset or 0: the kernel's rule (3 with the pipe, 4 without); perf rows
    # "attn_dec_bounds_N".
    attn_dec_bounds_env = os.environ.get("BW24_ATTN_DEC_BOUNDS", "0")
    attn_dec_bounds = 0  # the value __init__ checked
    # The attention blocks' merge of their warps with each head's factors worked out once (attn_chunk.cuh
    # BW24_ATTN_MERGE_FACTORS, why there; the same bits). The default; BW24_ATTN_MERGE_FACTORS=0 merges per element as
    # before (perf rows "no_attn_merge_factors").
    attn_merge_factors_env = os.environ.get("BW24_ATTN_MERGE_FACTORS", "1")
    attn_merge_factors = attn_merge_factors_env != "0"
    # The tensor-core attention's tile copies unrolled whole (attention_dec_mma.cu BW24_DEC_MMA_COPY_UNROLL, why there;
    # the same bits). The default since the H200 timed it at ac4d4d4 (verify rows -7.5% / -8.3% a layer, decode
    # level: evidence/attn_sweep_h200_ac4d4d4.log); BW24_ATTN_DEC_UNROLL=0 builds the loop (perf rows
    # "no_attn_dec_unroll").
    attn_dec_unroll_env = os.environ.get("BW24_ATTN_DEC_UNROLL", "1")
    attn_dec_unroll = attn_dec_unroll_env != "0"
    # The tensor-core attention's PDL trigger after its tiles instead of at its start (attention_dec_mma.cu
    # BW24_DEC_MMA_LATE_TRIGGER, why there: the Q8_0 model's extra cost of depth under PDL; the same bits). Opt-in
    # (BW24_ATTN_DEC_LATE=1; perf rows "attn_dec_late") until the H200 has timed it.
    attn_dec_late_env = os.environ.get("BW24_ATTN_DEC_LATE", "0")
    attn_dec_late = attn_dec_late_env == "1"
    # The decode step's token written by a kernel inside its graph into mapped pinned host memory (readback.TokenRing,
    # why there) instead of a device -> host copy queued between two replays. The default since an H100 timed it at
    # 7f1070b (bw24 alone, 2 rounds: the 0.6B +1.3% / +0.9% at d0 / d4096, the 8B +0.5% / +0.4%; gpu_loop_gap.py: the
    # copies cost the 0.6B's loop 9.8 us a token, the ring 1.4; evidence/{perf_ab,loop_gap}_h100_7f1070b.log);
    # BW24_TOKEN_RING=0 queues the copies as before (perf rows "no_token_ring").
    token_ring_env = os.environ.get("BW24_TOKEN_RING", "1")
    # A MoE block's input RMSNorm inside the router's launch (kernels/moe.cu moe_router_norm, why there; the unfused
    # launches' bits). Opt-in (BW24_MOE_ROUTER_NORM=1; perf rows "moe_router_norm") until the H200 has timed it.
    moe_router_norm_env = os.environ.get("BW24_MOE_ROUTER_NORM", "0")
    moe_norm_fuse = moe_router_norm_env == "1"
    # A dense block's RMSNorm split between the residual matvec ahead of it and the q8 matvec behind it (qmv8_na
    # writes the int8 codes of h * norm and each group's sum of squares, qmv8_3n scales by the norm factor:
    # kernels/qmatvec_q8.cu, why there), no rmsnorm launch. Unset: on for dense models of at most NORM_AHEAD_MAX_EMBD
    # (1,024) hidden dims (prepare_model's _norm_policy); BW24_NORM_AHEAD=1 / 0 forces it on / off (perf rows
    # "norm_ahead" / "no_norm_ahead"). Why by size, on the H200: the 0.6B (1,024) gained 2.7% / 4.5% at d0 / d4096
    # (f1380a4, beside llama.cpp) and 3.6% / 5.1% over the short class alone (30ecafb, bw24 alone, 2 rounds
    # interleaved); smollm2 (576; K < Q8_MIN_K, so no q8 producer) the same either way; the 8B (4,096) -0.1% /
    # -1.6% and the 32B's d0 -11% (its producers run at most 2 warps a row set, q8.na_warps; a form with qmv8's
    # blocks lost more, kernels/qmatvec_q8.cu). Unmeasured between 1,024 and 4,096: off there.
    norm_ahead_env = os.environ.get("BW24_NORM_AHEAD")
    norm_ahead = False  # in force: the variable, else _norm_policy by the model's size
    # A dense FFN's gate and up on the q8 path in blocks of one int8 group of the down projection's input, the GLU
    # and its quantization in their epilogue (kernels/qmatvec_q8.cu qmv8_glu, why there; ops/cuda/q8.py glu_plan):
    # no glu_q8 launch, the same bits. Opt-in (BW24_GLU_GROUPS=1; perf rows "glu_groups") until a GPU has timed it.
    glu_groups_env = os.environ.get("BW24_GLU_GROUPS", "0")
    glu_groups = glu_groups_env == "1"
    # rope_kv's work (qk-norm, rotation, the cache append) in the Q/K/V matvec's blocks, a q or k head a block
    # (kernels/qmatvec_q8.cu qmv8_qkvr, why there; ops/cuda/q8.py qkvr_plan): no rope_kv launch, the same bits.
    # Opt-in (BW24_QKV_ROPE=1; perf rows "qkv_rope") until a GPU has timed it.
    qkv_rope_env = os.environ.get("BW24_QKV_ROPE", "0")
    qkv_rope = qkv_rope_env == "1"
    # The input RMSNorm inside the fp32-activation Q/K/V and gate/up matvecs of decode / verify rows (qmv3n,
    # norm_matmul_multi). Opt-in (BW24_NORM_FUSE=1; perf rows record "norm_fuse"): the default at ca80b31,
    # where it bought decode nothing (the 0.6B 1128 tok/s with it at 230 launches a token, 1141 without at
    # 286: under PDL a launch overlaps the kernel ahead) and cost speculative verify dearly: a T-token
    # launch then ran one row per block (_verify_plan), so every block re-read all T rows of h for their
    # scales, and the 0.6B's 5-token verify went from 2750 us (3.0 decode steps, 0d45897) to 4583 (5.2).
    norm_fuse = os.environ.get("BW24_NORM_FUSE", "0") == "1"
    # A mixture-of-experts model's attention projections on the q8 path (_activation_policy). Opt-in
    # (BW24_MOE_Q8_ATTN=1; perf rows "moe_q8_attn") until the gate and the perf cells have run it: on fp32
    # activations the 30B-A3B's Q/K/V and output projections took 772 us of its 3,032 us decode token
    # (BW24_PDL=0 profile at b6232b5: qmv3 11.3 / 9.1 us and qmv 5.9 us a layer for 3-5 MB, ~0.5 TB/s),
    # where the 8B's q8 projections stream 2.3-3.4 TB/s. The fp32 policy came from the gate at a878d46 (int8
    # activations: decode NMSE 2.4e-3, prefill 9.9e-3 against 2e-3); since then a rounded model's bound is
    # max(2e-3, ROUNDING_FACTOR x its rounding alone): 0.0061 for the 30B-A3B's float16 cache (e7b99ea), the
    # int8 activations' own share measured too since emulate_rounding.
    moe_q8_attn = os.environ.get("BW24_MOE_Q8_ATTN", "0") == "1"
    # ... and the experts' decode / verify matvecs too (ops/cuda/moe.py q8_experts; perf rows "moe_q8"): the
    # whole model on int8 activations, as a dense model and as llama.cpp's MoE matvecs (q8_1 activations).
    # At b6232b5 the fp32 group dot made moe_gu / moe_down instruction-bound (577 + 402 us of the 30B-A3B's
    # 3,032 us a token for ~1 GB: ~1.1 TB/s), where the 8B's dp4a matvecs stream 2.9 TB/s. The default since
    # the H200 run at 2c3a1bc, with the router and the grouped prefill below: the gate, its routing pinned to
    # the exact decode's (engine/routing_pin.py), MATCH at 1.04-1.05x its own rounding alone
    # (evidence/run_gen_qwen3-30b-a3b-q4_k_m-s1_cuda_h200_2c3a1bc_gate_sensitivity_moe_q8*.log; unpinned, one
    # draw of near-tie flips, it had read 2.2x); the three together d0 434.1 vs 307.5 tok/s (1.41x, 2f60de3),
    # d4096 355.6 vs 273.7 (1.30x; 264.0 vs 271.9 without), pp512 13,754 vs 10,268 (1.34x; 0.49x without).
    # BW24_MOE_Q8=0 turns it off (perf rows "no_moe_q8"; "moe_q8" rows ran it while it was opt-in).
    moe_q8 = os.environ.get("BW24_MOE_Q8", "1") != "0"
    # A mixture of experts' router matvec (F32, 128 x 2048 on the 30B-A3B) and its top-k (moe_route) in one
    # launch, moe_router (ops/cuda/moe.py fused_router): at 8128fa9 (BW24_MOE_Q8=1, BW24_PDL=0 profile) the
    # router's qmv took 3.8 us and moe_route 4.9 us a layer, 415 of the 30B-A3B's 2,415 us a token. The
    # default since 2c3a1bc (above); BW24_MOE_ROUTER=0 turns it off (perf rows "no_moe_router").
    moe_router_fuse = os.environ.get("BW24_MOE_ROUTER", "1") != "0"
    # A mixture of experts' prefill FFN as grouped GEMMs on tensor cores with the routing read on the device
    # (ops/cuda/moe_prefill.py grouped_ffn, kernels/moe_mm.cu): five launches a layer whatever the routing, no
    # host sync, so MoE chunks take prefill graphs too. At 8128fa9 the 30B-A3B's pp512 ran 85.9 ms for 46.4 ms
    # of kernels (the host planned each layer's expert chunks after reading its routing, while the GPU
    # waited), 12.1 + 2.7 ms of them dequantizing experts to fp16 for cuBLAS. The default since 2c3a1bc
    # (above; alone at 2f60de3: pp512 13,862 vs 10,182, pp4096 15,793 vs 9,732); BW24_MOE_GROUPED=0 turns it
    # off (perf rows "no_moe_grouped").
    moe_grouped = os.environ.get("BW24_MOE_GROUPED", "1") != "0"
    # 32-column groups a stage of the grouped GEMMs (moe_mm.cu KG; moe_prefill.mm_kg takes the largest instance
    # <= it that divides K's groups: 2 for the GLU form, 4 for down at most), the same bits whatever it is.
    # At 2c3a1bc the 30B-A3B's pp512 spent 16.8 ms of its 39.0 in the GLU moe_mm at KG = 1 (~350 us a layer
    # for 226 MB of expert weights: each stage waited on one group's loads between two barriers). 4 (the GLU
    # form 2) by default since the H200 run at 6e0baa5 (kernel-check's KG cases green; pp512 16,182 vs 15,265
    # tok/s at 1, pp4096 17,342 vs 16,616, one session); BW24_MOE_MM_KG=1 or 2 measures fewer (perf rows
    # "moe_mm_kg_N").
    moe_mm_kg_env = os.environ.get("BW24_MOE_MM_KG", "4")
    moe_mm_kg = 4  # the value __init__ checked
    # Prefill's fp32 -> fp16 activation conversion (prefill_gemm.cu x_to_half) reading a row once into
    # registers where it fits (K <= 4096) instead of two or three strided passes; the same bits (kernel-check's
    # "x_to_half regs == loop" cases). At b6232b5 the conversions took 2.8 of the 8B's 29.8 ms of pp512 kernels
    # (20 us for a 512 x 4096 row block, ~0.6 TB/s), 0.74 of the 0.6B's 5.4 ms. The default since the H200 run
    # at 8128fa9 (evidence/perf_h200_8128fa9_xh_regs.log against perf_h200_8128fa9.log, the same session):
    # the 8B's pp512 17,755 vs 17,359 tok/s, pp4096 14,942 vs 14,690; the 0.6B's 96,660 vs 94,344 and
    # 67,300 vs 65,840 (+1.7-2.5% on every cell). BW24_XH_REGS=0 turns it off (perf rows: "no_xh_regs").
    xh_regs = os.environ.get("BW24_XH_REGS", "1") != "0"
    # Prefill's weight dequantization (prefill_gemm.cu dequant_rows_h) storing a warp's 2 KB of fp16 through
    # shared memory in 512-B stores, where the plain stores write 16 B at a 64-B stride; the same words to the
    # same places (kernel-check's "prefill dequant staged == plain" cases, green on the H200 at 29169ce). At
    # 1653f1f the 8B's pp512 spent 10.6 of its 29.7 ms of kernels in the plain kernel. H200, 29169ce
    # (evidence/dequant_h200_29169ce.log, perf_ab_h200_29169ce.log): the kernel alone 1.9-2.4 -> 3.2-3.8 TB/s
    # (42-53% -> 71-84% of HBM read) on the 8B's chunks of Q4_K, Q6_K, Q8_0 and Q4_0; the 8B's pp512 +13.3% (Q8_0,
    # 18,273 -> 20,697 tok/s) and +14.6% (Q4_K_M, 18,324 -> 20,999). The default since 8744df8; BW24_DEQ_STAGED=0 turns it
    # off (perf rows "no_deq_staged").
    deq_staged = os.environ.get("BW24_DEQ_STAGED", "1") != "0"
    # Prefill's dequantization on a side stream, a chunk ahead of the GEMMs, in two scratch slots (ops/cuda/overlap.py;
    # the same kernels and bits: kernel-check's "prefill gemm overlap == serial" cases, green on the H200 at 29169ce).
    # H200, 29169ce (perf_ab_h200_29169ce.log): the 8B's pp512 +2.7% (Q8_0) / +4.2% (Q4_K_M) alone, +3.1% / +1.7% on
    # top of the staged stores. H100, 76809cf (perf_ab_h100_76809cf.log, perf_h100_76809cf*.log): +4.6% (Q8_0) / +3.1%
    # (Q4_K_M) alone; beside llama.cpp the Q8_0 / Q4_0 pp512 1.68x -> 1.72x and 1.71x -> 1.76x, peak VRAM +64 MiB (the
    # second slot, PREFILL_SCRATCH; memory.plan counts it), within the VRAM target on both. Its GPU test inside captured
    # prefill graphs and its canary passed on an H100 at 9205b3a and 76809cf. The default since then;
    # BW24_PREFILL_OVERLAP=0 turns it off (perf rows "no_prefill_overlap").
    prefill_overlap_env = os.environ.get("BW24_PREFILL_OVERLAP", "1")
    prefill_overlap = prefill_overlap_env != "0"
    _overlap = None  # overlap.Overlap, made on first use
    _capture_serial = 0  # bumped by each capture: which recorded events a capture may wait on (overlap.py)
    # Prefill GEMM precision (ops/cuda/prefill.py): "fp16" (default) runs one fp16 GEMM for every weight, as
    # llama.cpp's prefill does; the gate holds the prefill to its rounded half (engine.Drift). "auto" runs
    # split (fp32-like) products, three fp16 GEMMs a product, for the weights whose decode keeps fp32
    # activations: every weight of a mixture-of-experts model and a small model's K < Q8_MIN_K ones (1024
    # since 6e0baa5's run, 2048 before); "split" for every weight. Perf rows record "prefill_auto" /
    # "prefill_split" ("prefill_fp16" before a6dcfe3's measurements made it the default). H200 at a6dcfe3 (run-gen MATCH on smollm2 and the 8B; the 30B's
    # fp16 prefill drift 0.0019): the 0.6B's pp512 34,865 tok/s against 28,723 with "auto" (ca80b31); the
    # 8B the same either way (its weights all take fp16 under "auto": K >= 2048); the 0.6B's pp4096 18,037
    # on the GEMM attention path but 22,229 with the tensor-core kernel that now takes its place.
    prefill_env = os.environ.get("BW24_PREFILL", "fp16")
    # Bytes of dequantized fp16 weight a prefill GEMM chunk (prefill.PREFILL_SCRATCH, 64 MiB), in MiB for a
    # measured run: a chunk within the L2 (50 MiB on the H200) may be read back by cuBLAS from L2 and
    # rewritten there by the next chunk's dequantization without going through HBM (at ca80b31 the 8B's
    # pp512 spent 8.7 of 33.5 ms of kernels writing its 16 GB of fp16 weights); more chunks cost more host
    # calls. Perf rows record "prefill_scratch_<MiB>m".
    prefill_scratch_env = os.environ.get("BW24_PREFILL_SCRATCH_MB")
    # Tokens a prefill forward takes (Engine.load's max_batch when not given). Every chunk dequantizes every
    # weight to fp16 once (the 8B's pp512: 10.3 of 33.5 ms of kernels at ca80b31) and pays the host's
    # per-layer calls (the 0.6B's pp512: 19.0 ms wall, 12.9 ms of kernels, a6dcfe3), so longer prompts gain
    # from longer chunks. 2048 since the H200 run at 8128fa9 (evidence/perf_h200_8128fa9_ubatch_2048.log):
    # the 8B's pp4096 20,810 vs 9,747 tok/s (2.13x; 1.50x at 512 the same session), the 0.6B's 88,422 vs
    # 43,682 (2.02x; 1.52x), the d4096 decode cells unchanged (384.1 / 912.5 tok/s), and the peak VRAM of
    # every cell within llama.cpp's + 10%: the 8B's pp4096 6.63 vs 6.23 GB (+6.4%), d4096 6.47 vs 6.27
    # (+3.2%), pp512 5.73 vs 5.70; the 0.6B's below llama.cpp's. (512, llama.cpp's n_ubatch, before.)
    # BW24_UBATCH=N measures another chunk (perf rows record "ubatch_N"). The buffers' logits hold
    # logit_rows rows whatever the chunk (models/common.Buffers).
    ubatch_env = os.environ.get("BW24_UBATCH")
    default_max_batch = 2048
    logit_rows = 128
    # A prefill chunk as one CUDA graph per chunk size, captured at the second chunk of that size and
    # replayed at every later one whatever its position (models/common.PrefillGraph). Prefill is host-bound
    # on small models: at e7b99ea the 0.6B's 512-token chunk cost ~13 ms of host time whatever its kernels
    # (pp512 18.2 ms wall for 11.2 ms of kernels; pp4096 in 512-token chunks 126 ms, in 2048-token ones 48 ms).
    # The cuBLAS GEMMs go through ctypes (cublas_direct: CuPy refuses a capturing stream), and the
    # attention's path is then chosen without the chunk's position (mma wherever usable, else the flash
    # kernel; never the position-sized GEMM path). MoE layers read their routing on the host: their
    # models take no prefill graphs (Transformer.prefill_capturable) and keep the eager attention rules.
    # The default since the H200 run at 370d098 (GPU pytest's replays == eager green;
    # evidence/perf_h200_370d098_prefill_graph.log): the 0.6B's pp512 88,983 tok/s (31,836 without, e7b99ea),
    # pp4096 53,190 (32,530); the 8B's pp512 17,878 (16,518), pp4096 15,139 (14,224).
    # BW24_PREFILL_GRAPH=0 turns them off (perf rows then record "no_prefill_graph").
    prefill_graphs = os.environ.get("BW24_PREFILL_GRAPH", "1") != "0"
    in_prefill_graph = False  # set by PrefillGraph around its chunk (the attention's position-free choice)
    # The decode / verify attention's split geometry for a measured run, "CH:NS" (keys a split unit, most
    # splits: ops/cuda/attn.py ATTN_SPACE), over the tuning table's (chunk 32 on the H200; 66 splits since
    # b6232b5's replayed steps, 33 from tune_attention's eager single-layer timings before). At depth 4096
    # the 8B's attention cost ~590 us a token against llama.cpp's ~320 (e7b99ea, from the d0 / d4096 rows),
    # in 8 kv heads x 33 splits = 264 blocks of 4 warps: two a SM. Perf rows record "attn_decode_CHxNS".
    attn_decode_env = os.environ.get("BW24_ATTN_DECODE")
    # Row-groups of weights a decode q8 matvec thread loads before summing any (kernels/qmatvec_q8.cu
    # QMV8_DECODE_LOADS, why there; the same bits whatever the value). Unset: each weight's tuning-table entry
    # ("loads", with its W and R; launch.QmvConfigs.loads; none: 0, the loop as before). BW24_QMV8_LOADS=N, one of
    # QMV8_LOADS, forces N for every weight (0: the loop as before everywhere; perf rows "qmv8_loads_N").
    qmv8_loads_env = os.environ.get("BW24_QMV8_LOADS")
    qmv8_loads: int | None = None  # the value __init__ checked; None: the table's (a sweep may set one on an instance)
    # A decode q8 matvec's first weight group loaded before its PDL wait (kernels/qmatvec_q8.cu QMV8_EARLY, why there;
    # the same bits). The default; BW24_QMV8_EARLY=0 loads it after the wait (perf rows "no_qmv8_early"): the test
    # of whether those early loads, in the kernels PDL starts while the attention still streams its cache, are what
    # costs the Q8_0 model ~12 us a layer at depth under PDL (docs/h200-log.md "What ran on the H200 (ac4d4d4 and e0780dc)").
    qmv8_early_env = os.environ.get("BW24_QMV8_EARLY", "1")
    qmv8_early = qmv8_early_env != "0"
    tuning_dir_env = TUNING_DIR_ENV  # (ops/cuda/launch.py TUNING_DIR; perf rows "tuning_dir")

    def opt_in(self) -> list[str]:
        """The paths that differ from the defaults, by environment: opt-ins on, and "no_" + a default
        turned off (perf rows record them: a variant of the cell, never mixed into its baseline)."""
        return [name for name, on in (("attn_gemm", self.attn_gemm_env == "1"), ("attn_mma", self.attn_mma),
                                      ("no_attn_mma_split", not self.attn_mma_split),
                                      ("no_attn_mma", self.attn_mma_env == "0"),
                                      ("attn_sums", self.attn_sums), ("no_attn_split_heads", not self.attn_split_heads),
                                      ("no_attn_pipe", not self.attn_pipe), ("no_attn_combine32", not self.attn_combine32),
                                      (f"attn_short_{self.attn_short}", self.attn_short not in (0, 256)),
                                      ("no_attn_short", self.attn_short == 0),
                                      (f"attn_block_heads_{self.attn_block_heads_env}",
                                       self.attn_split_heads and (self.attn_block_heads_env != "4" or not self.attn_few_kv)),
                                      (f"attn_fill_{self.attn_fill_env}", self.attn_fill_env != "1"),
                                      (f"attn_min_blocks_{self.attn_min_blocks_env}", self.attn_min_blocks_env != "1"),
                                      (self.attn_depth.label if self.attn_depth else "", self.attn_depth is not None
                                       and self.attn_depth != _attn.AttnDepth.parse(_attn.DEPTH_DEFAULT)),
                                      ("no_attn_depth", self.attn_depth_env == "0"),
                                      (f"attn_dec_mma_{self.attn_dec_mma_env}", self.attn_dec_mma_env not in (None, "0")),
                                      ("no_attn_dec_mma", self.attn_dec_mma_env == "0"),
                                      ("no_attn_dec_pipe", not self.attn_dec_pipe),
                                      ("no_attn_dec_early", self.attn_dec_pipe and not self.attn_dec_early),
                                      (f"attn_dec_bounds_{self.attn_dec_bounds_env}", self.attn_dec_bounds_env != "0"),
                                      ("no_attn_merge_factors", not self.attn_merge_factors),
                                      ("no_attn_dec_unroll", not self.attn_dec_unroll),
                                      ("attn_dec_late", self.attn_dec_late),
                                      ("no_token_ring", self.token_ring_env == "0"),
                                      ("no_qmv8_early", not self.qmv8_early),
                                      ("moe_router_norm", self.moe_norm_fuse), ("norm_ahead", self.norm_ahead_env == "1"),
                                      ("glu_groups", self.glu_groups), ("qkv_rope", self.qkv_rope),
                                      ("no_norm_ahead", self.norm_ahead_env == "0"),
                                      ("no_attn_gemm", self.attn_gemm_env == "0"),
                                      ("attn_fuse", self.attn_fuse_env == "1"), ("no_attn_fuse", self.attn_fuse_env == "0"),
                                      ("norm_fuse", self.norm_fuse), ("moe_q8_attn", self.moe_q8_attn),
                                      ("no_moe_q8", not self.moe_q8), ("no_moe_router", not self.moe_router_fuse),
                                      ("no_moe_grouped", not self.moe_grouped),
                                      (f"moe_mm_kg_{self.moe_mm_kg_env}", self.moe_mm_kg_env != "4"),
                                      ("no_xh_regs", not self.xh_regs), ("no_deq_staged", not self.deq_staged),
                                      ("no_prefill_overlap", not self.prefill_overlap),
                                      ("no_attn_q8", not self.attn_q8_env),
                                      ("no_pdl", not self.pdl_env),
                                      (f"q8_min_k_{Q8_MIN_K}", Q8_MIN_K != Q8_MIN_K_DEFAULT),
                                      ("no_draft_q8", not self.draft_q8),
                                      (f"spec_k_max_{self.spec_k_max_env}", self.spec_k_max_env is not None),
                                      ("prefill_auto", self.prefill_env == "auto"),
                                      ("prefill_split", self.prefill_env == "split"),
                                      (f"prefill_scratch_{self.prefill_scratch_env}m", self.prefill_scratch_env),
                                      (f"ubatch_{self.ubatch_env}", self.ubatch_env not in (None, str(type(self).default_max_batch))),
                                      ("no_prefill_graph", not self.prefill_graphs),
                                      (f"attn_decode_{(self.attn_decode_env or '').replace(':', 'x')}",
                                       self.attn_decode_env),
                                      (f"qmv8_loads_{self.qmv8_loads}", self.qmv8_loads is not None),
                                      ("tuning_dir", self.tuning_dir_env)) if on]

    def __init__(self, *, variant: str = "", use_graphs: bool = True) -> None:
        import cupy as cp
        from bw24.runtime import device_info, new_stream, require_gpu

        if self.attn_gemm_env not in ("auto", "0", "1"):
            raise ValueError(f"BW24_ATTN_GEMM={self.attn_gemm_env!r}: use auto (the default), 1 or 0")
        if self.attn_mma_env not in ("auto", "0", "1"):
            raise ValueError(f"BW24_ATTN_MMA={self.attn_mma_env!r}: use auto (the default), 1 or 0")
        if self.prefill_env not in PRECISIONS:
            raise ValueError(f"BW24_PREFILL={self.prefill_env!r}: use one of {', '.join(PRECISIONS)}")
        if self.prefill_scratch_env is not None:
            if not (self.prefill_scratch_env.isdigit() and 1 <= int(self.prefill_scratch_env) <= 4096):
                raise ValueError(f"BW24_PREFILL_SCRATCH_MB={self.prefill_scratch_env!r}: a whole number of MiB, 1..4096")
            _prefill.PREFILL_SCRATCH = int(self.prefill_scratch_env) << 20
        if self.ubatch_env is not None:
            if not (self.ubatch_env.isdigit() and 1 <= int(self.ubatch_env) <= 16384):
                raise ValueError(f"BW24_UBATCH={self.ubatch_env!r}: a whole number of tokens, 1..16384")
            self.default_max_batch = int(self.ubatch_env)
        if self.attn_fuse_env not in (None, "0", "1"):
            raise ValueError(f"BW24_ATTN_FUSE={self.attn_fuse_env!r}: use 1 or 0 (unset: the tuning table)")
        if not (self.attn_short_env.isdigit() and int(self.attn_short_env) % 32 == 0
                and int(self.attn_short_env) <= 1024):
            raise ValueError(f"BW24_ATTN_SHORT={self.attn_short_env!r}: a multiple of 32 up to 1024 (keys; 0 off; "
                             f"unset: 256)")
        self.attn_short = int(self.attn_short_env)
        if self.attn_block_heads_env not in [str(n) for n in _attn.BLOCK_HEADS]:
            raise ValueError(f"BW24_ATTN_BLOCK_HEADS={self.attn_block_heads_env!r}: use one of "
                             f"{', '.join(map(str, _attn.BLOCK_HEADS))} (q heads an attention block; 4 the default)")
        self.attn_block_heads = int(self.attn_block_heads_env)
        if self.attn_fill_env not in ("1", "2", "4", "8"):
            raise ValueError(f"BW24_ATTN_FILL={self.attn_fill_env!r}: use 1 (off, the default), 2, 4 or 8 (blocks "
                             "sharing an attention block's q heads at shallow depth)")
        self.attn_fill = int(self.attn_fill_env)
        if self.attn_min_blocks_env not in [str(n) for n in _attn.MIN_BLOCKS]:
            raise ValueError(f"BW24_ATTN_MIN_BLOCKS={self.attn_min_blocks_env!r}: 1 (off, the default) .. 6 (attention "
                             "blocks an SM must hold)")
        self.attn_min_blocks = int(self.attn_min_blocks_env)
        if self.qmv8_loads_env is not None and self.qmv8_loads_env not in [str(n) for n in QMV8_LOADS]:
            raise ValueError(f"BW24_QMV8_LOADS={self.qmv8_loads_env!r}: use one of {', '.join(map(str, QMV8_LOADS))} "
                             "(row-groups of weights a decode matvec thread loads at once, for every weight; 0: the "
                             "loop as before; unset: each weight's tuning-table entry)")
        self.qmv8_loads = None if self.qmv8_loads_env is None else int(self.qmv8_loads_env)
        e = "0" if self.attn_dec_mma_env is None else self.attn_dec_mma_env  # (unset: the model's policy decides)
        if not (e == "all" or (e.isdigit() and int(e) % 32 == 0)):
            raise ValueError(f"BW24_ATTN_DEC_MMA={e!r}: 0 (off), a positive multiple of 32 (live keys past which a "
                             f"row's attention runs on tensor cores) or all; unset: {_attn.DEC_MMA_KEYS} for models of "
                             f"{_attn.DEC_MMA_MIN_G} or more q heads a kv head, off for the others")
        self.attn_dec_mma = _attn.DEC_MMA_ALL if e == "all" else int(e)
        for var, value, on, default_on in (
                ("BW24_ATTN_DEC_PIPE", self.attn_dec_pipe_env, "the tensor-core attention's tiles through two cp.async "
                 "stages", True),
                ("BW24_MOE_ROUTER_NORM", self.moe_router_norm_env, "a MoE block's input RMSNorm inside the router's "
                 "launch", False),
                ("BW24_GLU_GROUPS", self.glu_groups_env, "a dense FFN's GLU and its int8 rows inside the gate/up "
                 "matvec's blocks", False),
                ("BW24_QKV_ROPE", self.qkv_rope_env, "rope_kv's work inside the Q/K/V matvec's blocks", False),
                ("BW24_ATTN_DEC_EARLY", self.attn_dec_early_env, "the tensor-core attention's first tiles of older "
                 "cache rows before the PDL wait", True),
                ("BW24_ATTN_MERGE_FACTORS", self.attn_merge_factors_env, "the attention blocks' merge with each head's "
                 "factors worked out once", True),
                ("BW24_ATTN_DEC_UNROLL", self.attn_dec_unroll_env, "the tensor-core attention's tile copies unrolled "
                 "whole", True),
                ("BW24_ATTN_DEC_LATE", self.attn_dec_late_env, "the tensor-core attention's PDL trigger after its "
                 "tiles", False),
                ("BW24_TOKEN_RING", self.token_ring_env, "the decode step's token written inside its graph into "
                 "mapped host memory", True),
                ("BW24_QMV8_EARLY", self.qmv8_early_env, "a decode q8 matvec's first weight group loaded before "
                 "its PDL wait", True),
                ("BW24_PREFILL_OVERLAP", self.prefill_overlap_env, "prefill's dequantization a chunk ahead on a side "
                 "stream", True)):
            _check_switch(var, value, on, default_on)
        if self.attn_dec_bounds_env not in ("0", "1", "2", "3", "4"):
            raise ValueError(f"BW24_ATTN_DEC_BOUNDS={self.attn_dec_bounds_env!r}: 1 .. 4 (blocks an SM the tensor-core "
                             "attention is built to fit); 0 or unset: its rule, 3 with the pipe and 4 without")
        self.attn_dec_bounds = int(self.attn_dec_bounds_env)
        if self.norm_ahead_env not in (None, "0", "1"):
            raise ValueError(f"BW24_NORM_AHEAD={self.norm_ahead_env!r}: use 1 (a dense block's RMSNorm inside the matvecs "
                             f"on either side of it) or 0 (off); unset: on for dense models of at most "
                             f"{NORM_AHEAD_MAX_EMBD} hidden dims")
        self.norm_ahead = self.norm_ahead_env == "1"  # (unset: prepare_model's _norm_policy decides by the model)
        self.attn_depth = _attn.depth_in_force(self.attn_depth_env, (self.attn_block_heads_env, self.attn_min_blocks_env,
                                                                      self.attn_fill_env) != ("4", "1", "1"))
        if self.moe_mm_kg_env not in ("1", "2", "4"):
            raise ValueError(f"BW24_MOE_MM_KG={self.moe_mm_kg_env!r}: use 1, 2 or 4 (the default)")
        self.moe_mm_kg = int(self.moe_mm_kg_env)
        self.spec_k_cap = spec_k_cap_of(self.spec_k_max_env)
        if self.attn_decode_env is not None:
            from .attn import ATTN_SPACE

            ch, _, ns = self.attn_decode_env.partition(":")
            if not (ch.isdigit() and ns.isdigit() and int(ch) in ATTN_SPACE["chunk"]
                    and int(ns) in ATTN_SPACE["max_splits"]):
                raise ValueError(f"BW24_ATTN_DECODE={self.attn_decode_env!r}: CH:NS with CH in {ATTN_SPACE['chunk']} "
                                 f"and NS in {ATTN_SPACE['max_splits']} (unset: the tuning table)")
            self.set_launch_config("attention", "decode", {"chunk": int(ch), "max_splits": int(ns)})
        require_gpu()
        self.cp = cp
        self.xp = cp
        self.stream = new_stream()
        self.variant = variant  # "" = production kernels; tests may select planted_bug / _verify / _split / _pipe
        self._cache: dict[tuple[str, int], Any] = {}
        self._scratch: dict[str, Any] = {}
        self._scratch_gen = 0  # bumped by every (re)allocation in _buf: captured graphs compare it
        self._scratch_outer: list[dict[str, Any]] = []  # the scratch of blocks around exact_activations' own
        self.scratch_peak = 0  # the most scratch bytes held at once, the outer blocks' counted (memory_report)
        # (ptr, T, K) of the activation whose int8 quantization is in the q8 scratch (ops/cuda/q8.py):
        # set by a fused producer (rmsnorm_reg with xq, glu_q8) after its launch, cleared by any launch,
        # allocation or host copy, so only the very next op (a q8 matvec of those rows) may use it.
        self._q8_ready: tuple | None = None
        self.weight_bytes = 0
        self.use_graphs = use_graphs
        self._host_synced = False  # set by an op that had to read the device (not capturable)
        self._reads = None  # readback.PinnedReads, made at the first to_host_later
        self._token_ring = None  # readback.TokenRing (BW24_TOKEN_RING=1), made at its first use
        self.qmv_configs = QmvConfigs.for_device()  # matvec launch configs (tuning table or defaults)
        # prefill GEMM: "fp16", "auto" or "split" (fp32-like) (ops/cuda/prefill.py; BW24_PREFILL, above)
        self.prefill_precision = self.prefill_env
        self.kv_dtype = kv_dtype_from_env()  # KV-cache element: float16 (default) or float32
        self.verify_rows: int | None = None  # rows per block of a T > 1 q8 matvec: q8.verify_rows unless set (sweeps)
        self.pdl = self.pdl_env and device_info().cc >= (9, 0)  # griddepcontrol: sm_90+
        self._capturing = False  # inside CapturedGraph.capture: launches may take PDL
        self._rope_tabs: dict[str, int] = {}  # norm.rope_table: positions built per table

    # ---- launching ------------------------------------------------------------------------------
    def _k(self, file: str, name: str):
        return self._k_with(file, name, ())

    def _k_with(self, file: str, name: str, extra: tuple[tuple[str, object], ...]):
        """_k with defines of one call on top (attention.cu's BW24_ATTN_DEC_MMA where attn.dec_mma_from applies)."""
        return get_kernel(file, name, self.kernel_defines(file) + extra)

    def kernel_defines(self, file: str) -> tuple[tuple[str, object], ...]:
        """The defines this backend builds kernels/<file> with. A planted variant's macro goes only to the files
        whose source names it (kernels.names_macro): elsewhere it changes no code, and left in the defines it
        made every module a canary's cases touched compile again under another cache key."""
        planted = {"planted_bug": (("BW24_PLANTED_BUG", 1),), "planted_verify": (("BW24_PLANTED_VERIFY", 1),),
                   "planted_split": (("BW24_PLANTED_SPLIT", 1),), "planted_pipe": (("BW24_PLANTED_PIPE", 1),),
                   "planted_combine": (("BW24_PLANTED_COMBINE", 1),), "planted_short": (("BW24_PLANTED_SHORT", 1),),
                   "planted_fill": (("BW24_PLANTED_FILL", 1),),
                   "planted_minblocks": (("BW24_PLANTED_MINBLOCKS", 1),),
                   "planted_xh": (("BW24_PLANTED_XH", 1),),
                   "planted_deqst": (("BW24_PLANTED_DEQST", 1),),
                   "planted_decmma": (("BW24_PLANTED_DECMMA", 1),),
                   "planted_decpipe": (("BW24_PLANTED_DECPIPE", 1),),
                   "planted_decearly": (("BW24_PLANTED_DECEARLY", 1),),
                   "planted_mergef": (("BW24_PLANTED_MERGEF", 1),),
                   "planted_decbounds": (("BW24_PLANTED_DECBOUNDS", 1),),
                   "planted_decunroll": (("BW24_PLANTED_DECUNROLL", 1),),
                   "planted_declate": (("BW24_PLANTED_DECLATE", 1),),
                   "planted_qmv8late": (("BW24_PLANTED_QMV8LATE", 1),),
                   "planted_routernorm": (("BW24_PLANTED_ROUTERNORM", 1),),
                   "planted_na": (("BW24_PLANTED_NA", 1),),
                   "planted_glug": (("BW24_PLANTED_GLUG", 1),),
                   "planted_qkvr": (("BW24_PLANTED_QKVR", 1),),
                   "planted_route": (("BW24_PLANTED_ROUTE", 1),),
                   "planted_routerpf": (("BW24_PLANTED_ROUTERPF", 1),),
                   "planted_expand": (("BW24_PLANTED_EXPAND", 1),)}.get(self.variant, ())
        defines = tuple(d for d in planted if names_macro(file, d[0]))
        if self.pdl:
            defines += (("BW24_PDL", 1),)
        if self.attn_sums and file == "attention.cu":
            defines += (("BW24_ATTN_SUMS", 1),)
        if self.attn_pipe and file == "attention.cu":
            defines += (("BW24_ATTN_PIPE", 1),)
        if not self.attn_combine32 and file == "attention.cu":  # (attention.cu unrolls 32 by default)
            defines += (("BW24_COMBINE_UNROLL", 8),)
        if self.attn_dec_pipe and file == "attention_dec_mma.cu":
            defines += (("BW24_DEC_MMA_PIPE", 1),)
            if self.attn_dec_early:  # (the pipe's stages hold the early tiles: nothing without it)
                defines += (("BW24_DEC_MMA_EARLY", 1),)
        if self.attn_dec_bounds and file == "attention_dec_mma.cu":
            defines += (("DM_MIN_BLOCKS", self.attn_dec_bounds),)
        if not self.attn_dec_unroll and file == "attention_dec_mma.cu":  # (attention_dec_mma.cu unrolls by default)
            defines += (("BW24_DEC_MMA_COPY_UNROLL", 0),)
        if self.attn_dec_late and file == "attention_dec_mma.cu":
            defines += (("BW24_DEC_MMA_LATE_TRIGGER", 1),)
        if not self.qmv8_early and file == "qmatvec_q8.cu":  # (qmatvec_q8.cu loads early by default, under PDL)
            defines += (("QMV8_EARLY", 0),)
        if not self.attn_merge_factors and file in ("attention.cu", "attention_dec_mma.cu"):  # (attn_chunk.cuh's merge)
            defines += (("BW24_ATTN_MERGE_FACTORS", 0),)
        if self.attn_short and file in ("attention.cu", "attention_dec_mma.cu"):  # (one split rule, attn_chunk.cuh)
            defines += (("BW24_ATTN_SHORT", self.attn_short),)
        if self.attn_fill > 1 and file == "attention.cu":
            defines += (("BW24_ATTN_FILL", self.attn_fill),)
        if self.attn_min_blocks > 1 and file == "attention.cu":
            defines += (("ATTN_MIN_BLOCKS", self.attn_min_blocks),)
        return defines

    def q8_loads(self, w, n: int, k: int, nt: int) -> tuple[tuple[str, object], ...]:
        """The extra define of a q8 matvec launch of weight w's type at the (stacked) shape [n, k] (q8.py's
        launchers take it through _k_with): QMV8_DECODE_LOADS for a decode launch (nt == 1) whose value,
        BW24_QMV8_LOADS's or the table's, is not 0; nothing otherwise (verify launches never read it)."""
        if nt != 1:
            return ()
        v = self.qmv8_loads if self.qmv8_loads is not None else self.qmv_configs.loads(w.qtype, n, k)
        return (("QMV8_DECODE_LOADS", v),) if v else ()

    def _launch(self, fn, grid, block, args, shared_mem: int = 0, stream=None) -> None:
        """Every launch of the backend (shared_mem: dynamic shared memory bytes, e.g. moe.cu's staging), on the
        backend's stream unless `stream` (the prefill overlap's side stream) is given."""
        self._q8_ready = None  # the launch may write any buffer: producers re-mark after launching
        s = self.stream if stream is None else stream
        if shared_mem > SMEM_DEFAULT_LIMIT:  # (attention_dec_mma.cu's two stages: 69.6 KB)
            allow_dynamic_shared(fn, shared_mem)
        if self.pdl and self._capturing and stream is None:  # (a side-stream launch follows an event: plain edges)
            from bw24.runtime.launch import launch_pdl

            launch_pdl(fn, [int(g) for g in grid], int(block), args, int(shared_mem), s)
            return
        with s:
            fn(tuple(int(g) for g in grid), (int(block),), args, shared_mem=int(shared_mem))

    def overlap(self):
        """The prefill overlap's side stream and events (ops/cuda/overlap.py), made on first use."""
        if self._overlap is None:
            from .overlap import Overlap

            self._overlap = Overlap(self)
        return self._overlap

    def _buf(self, key: str, n: int, dtype=np.float32, *, zeroed: bool = False):
        """Scratch reused across calls (grown outside capture: the first eager step sizes it). zeroed:
        zero-filled when (re)allocated, for counters that kernels re-arm themselves (tickets)."""
        a = self._scratch.get(key)
        if a is None or a.size < n:
            grown = a is not None
            with self.stream:
                a = self._scratch[key] = (self.cp.zeros if zeroed else self.cp.empty)(max(n, 1), dtype=dtype)
            self._scratch_gen += 1
            if grown and not self._capturing:
                self._release_pool()
            held = sum(int(b.nbytes) for d in (*self._scratch_outer, self._scratch) for b in d.values())
            self.scratch_peak = max(self.scratch_peak, held)
        return a[:n]

    def _release_pool(self) -> None:
        """Hand CuPy's cached free blocks back to the driver. A grown scratch leaves its smaller array in the
        pool, where nothing of its size may ever come again (the 8B's prefill GEMM scratch: its Q/K/V weight
        chunk and result, 50 + 50 MB at 2048 tokens, before the gate/up ones grow them): device memory the
        process holds for nothing, and peak VRAM counts it. cudaFree waits for the device (so no queued kernel
        still reads a freed block), so this runs only when a buffer grows: in the eager first run of a shape,
        never in a captured or replayed step."""
        self.cp.get_default_memory_pool().free_all_blocks()

    # ---- memory ---------------------------------------------------------------------------------
    def empty(self, shape, dtype=np.float32):
        self._q8_ready = None  # a fresh array may reuse a marked address
        with self.stream:
            return self.cp.empty(shape, dtype=dtype)

    def zeros(self, shape, dtype=np.float32):
        self._q8_ready = None
        with self.stream:
            return self.cp.zeros(shape, dtype=dtype)

    def to_host(self, a):
        self._host_synced = True  # a step that reads the device cannot be captured (capture's eager run)
        out = a.get(stream=self.stream)
        self.stream.synchronize()
        return out

    def to_host_later(self, a):
        if self._capturing:
            raise RuntimeError("to_host_later inside a captured step (a graph cannot hold the host's read)")
        if self._reads is None:
            from .readback import PinnedReads

            self._reads = PinnedReads(self.cp, self.stream)
        return self._reads.read(a)

    @property
    def token_ring(self):
        """The ring the decode step publishes its token into (BW24_TOKEN_RING=1), else None."""
        if self.token_ring_env != "1":
            return None
        if self._token_ring is None:
            from .readback import TokenRing

            self._token_ring = TokenRing.mapped(self.cp, self.stream)
        return self._token_ring

    def publish_token(self, token, pos):
        ring = self.token_ring
        if ring is not None:
            self._launch(self._k("readback.cu", "publish_token"), (1,), 32, (token, pos, ring.dev, np.int32(ring.n)))

    def round_to(self, a, dtype):
        self._q8_ready = None
        with self.stream:  # ordered with the forwards' launches
            a[...] = a.astype(dtype)

    def copy_from_host(self, dst, src):
        src = np.ascontiguousarray(src, dtype=dst.dtype)
        if dst.shape != src.shape:
            raise ValueError(f"copy_from_host: shape {src.shape} into {dst.shape}")
        self._q8_ready = None
        dst.set(src, stream=self.stream)

    def synchronize(self):
        self.stream.synchronize()

    graph_rows = QMV_NT[-1]  # above: the cuBLAS prefill GEMM, which stream capture refuses

    def capture(self, step, keys=None):
        """First call runs eagerly (compiles kernels, sizes scratch); the second captures the step
        as a CUDA graph and launches it; later calls replay it.

        keys (BW24_ATTN_DEPTH, self.attn_depth): a callable giving the cache's keys for the call about to run
        (kv.n_past after reserve); each depth class (at most attn_depth.keys keys, or more) then has its own
        state, eager first call and graph, run with that class's attention geometry (_attn_class). A class's
        eager call may grow scratch another class's graph holds: a graph whose scratch generation is not the
        backend's is captured again."""
        from bw24.runtime import CapturedGraph

        depth = self.attn_depth if keys is not None else None
        states: dict[str | None, dict] = {}

        def state_of(cls: str | None) -> dict:
            return states.setdefault(cls, {"n": 0, "g": None, "gen": None, "eager": not self.use_graphs})

        def run():
            cls = self._step_class(depth, keys()) if keys is not None else None  # (no keys: no classes)
            state = state_of(cls)
            n = state["n"]
            state["n"] += 1
            with self._attn_class(depth, cls):
                if n == 0:
                    self._host_synced = False
                    step()
                    state["eager"] |= self._host_synced  # e.g. stochastic sampling on the host
                elif state["eager"]:
                    step()
                else:
                    if state["g"] is None or (depth is not None and state["gen"] != self._scratch_gen):
                        self._capturing = True
                        self._capture_serial += 1
                        try:
                            state["g"] = CapturedGraph(self.stream).capture(step)
                        finally:
                            self._capturing = False
                        state["gen"] = self._scratch_gen
                    state["g"].replay()

        # the state without classes (PrefillGraph reads its graph), with depth classes the shallow one's
        run.graph_state = state_of(None if depth is None else "shallow")
        run.graph_states = states
        return run

    def attn_class_of(self, keys: int):
        """The depth class a captured step over `keys` cache keys runs in (capture's rule), as a context: what a
        launch count of an eager step must be taken inside to count the kernels the step's graph replays
        (perf/runner.py; outside a class, BW24_ATTN_DEC_MMA's default launches both attention kernels)."""
        return self._attn_class(self.attn_depth, self._step_class(self.attn_depth, keys))

    def _step_class(self, depth, keys: int) -> str | None:
        """The class of a captured step over `keys` cache keys: "deep" past depth.keys (BW24_ATTN_DEPTH), else
        "short" up to attn_short keys (BW24_ATTN_SHORT, unless BW24_ATTN_FUSE forces the pass 2 either way), else
        "shallow"; None without classes (no depth classes and no short one). No short class where the tensor-core
        rows (BW24_ATTN_DEC_MMA) start at or below attn_short keys: its fused pass 2 keeps every row on attn_split
        (attn.dec_mma_from), so a row past the mma threshold would take attn_split in a short decode step and the
        mma kernel in a verify step just past the edge, other bits (the GPU spec test with BW24_ATTN_DEC_MMA=64
        caught the mma kernel never running at ec63857). The defaults (1,024 keys or off) keep the class."""
        if _deep(depth, keys):
            return "deep"
        mma = self.attn_dec_mma
        if (self.attn_short and self.attn_fuse is None and keys <= self.attn_short
                and (mma == 0 or (mma != _attn.DEC_MMA_ALL and mma >= self.attn_short))):
            return "short"
        return "shallow" if depth is not None else None

    @contextmanager
    def _attn_class(self, depth, cls: str | None):
        """The attention of one class while a step runs or is captured: with depth classes (ops/cuda/attn.py
        AttnDepth) shallow and short, depth.heads q heads a block; deep, depth.min_blocks blocks an SM; short,
        the fused pass 2 (attn_short_fused). None: as set."""
        if cls is None:
            yield
            return
        saved = self.attn_block_heads, self.attn_min_blocks, self.attn_class, self.attn_short_fused
        if depth is not None:
            deep = cls == "deep"
            self.attn_block_heads, self.attn_min_blocks = (saved[0], depth.min_blocks) if deep else (depth.heads, saved[1])
            self.attn_class = "deep" if deep else "shallow"  # (the short class is shallow to dec_mma_launches)
        self.attn_short_fused = cls == "short"
        try:
            yield
        finally:
            self.attn_block_heads, self.attn_min_blocks, self.attn_class, self.attn_short_fused = saved

    # ---- weights --------------------------------------------------------------------------------
    def load_weight(self, ti):
        key = (ti.name, ti.raw.ctypes.data)
        if key not in self._cache:
            if len(ti.shape) not in (2, 3):
                raise UnsupportedModelError(f"{ti.name}: expected a 2-D or 3-D weight, got shape {ti.shape}")
            try:
                w = upload_weight(ti.name, ti.raw, ti.qtype, tuple(ti.shape), self._put)
            except UnsupportedWeightError as e:
                raise UnsupportedModelError(f"{ti.name}: {e}") from None
            self.weight_bytes += w.nbytes
            self._cache[key] = w
        return self._cache[key]

    def load_vector(self, ti):
        key = (ti.name, ti.raw.ctypes.data)
        if key not in self._cache:
            if len(ti.shape) != 1:
                raise UnsupportedModelError(f"{ti.name}: expected a 1-D tensor, got shape {ti.shape}")
            self._cache[key] = self._put(np.ascontiguousarray(ti.dequantize(), np.float32))
        return self._cache[key]

    def _put(self, host: np.ndarray):
        """Upload through the runtime arena's reusable pinned staging buffer (chunked, one read of the mmap)."""
        host = np.ascontiguousarray(host)
        self._q8_ready = None
        with self.stream:
            d = self.cp.empty(host.shape, host.dtype)
        if getattr(self, "_arena", None) is None:
            from bw24.runtime import DeviceArena

            self._arena = DeviceArena(stream=self.stream)
        self._arena.copy_in(d, host, getattr(self, "_upload_bar", None))
        return d

    def weight_from_raw(self, name: str, raw: np.ndarray, qtype, shape) -> QWeight:
        """Upload a weight given as raw GGUF bytes (kernel_check and tests)."""
        return upload_weight(name, raw, qtype, tuple(shape), self._put)

    # ---- ops ------------------------------------------------------------------------------------
    def embed(self, ids, table: QWeight, scale, *, out):
        T = ids.shape[0]
        assert out.shape == (T, table.k) and out.dtype == np.float32 and ids.dtype == np.int32
        G = table.k // 32
        fn = self._k("qmatvec.cu", f"dequant_rows<{table.fmt}>")
        self._launch(fn, (math.ceil(T * G / 128),), 128,
                     (*table.args(), ids, _i32(0), _i32(T), _i32(table.k), np.float32(scale), out))

    def rmsnorm(self, x, w, eps, *, out, add=None):
        K = x.shape[-1]
        assert w.shape == (K,) and out.shape == x.shape and x.flags.c_contiguous and out.flags.c_contiguous
        if add is not None:
            assert add.shape == x.shape and add.flags.c_contiguous
        _norm.rmsnorm(self, x, w, eps, out=out, add=add)  # one pass in registers (ops/cuda/norm.py)

    def add(self, x, y, *, out):
        n = out.size
        self._launch(self._k("elementwise.cu", "add"), (min(math.ceil(n / 256), 4096),), 256, (x, y, out, np.int64(n)))

    def _verify_plan(self, path: str, T: int, R: int, ws=(), K: int = 0) -> tuple[int, int]:
        """(NT, R) of a T-token matvec launch over weights ws (rows K long) whose decode config has R rows
        per block. T = 1: (1, R). q8 path (ops/cuda/q8.py): NT = T exactly up to 8, R from q8.verify_rows.
        f32 path: NT the bucket QMV_NT, R from launch.f32_verify_rows (by quant type and K). Either R may be
        overridden by self.verify_rows (gpu_verify_sweep.py). R never changes a row's bits."""
        if T == 1:
            return 1, R
        if path == "q8":
            from . import q8

            return q8.q8_nt(T), self.verify_rows or q8.verify_rows(T)
        from .launch import f32_verify_rows

        return next(n for n in QMV_NT if T <= n), self.verify_rows or f32_verify_rows([w.qtype for w in ws], K)

    def matmul(self, w: QWeight, x, *, out, bias=None, residual=None, softcap: float = 0.0):
        T, K = x.shape
        N = w.n
        assert K == w.k and out.shape == (T, N), f"matmul: W {w.shape} x {x.shape} -> out {out.shape}"
        assert x.flags.c_contiguous and out.flags.c_contiguous and x.dtype == np.float32
        if residual is not None:
            assert residual.shape == out.shape and residual.flags.c_contiguous
        if T <= QMV_NT[-1]:
            path, W, R = self.qmv_configs.plan(w.qtype, N, K)
            nt, R = self._verify_plan(path, T, R, (w,), K)
            if path == "q8":  # int8 activations + dp4a (ops/cuda/q8.py, kernels/qmatvec_q8.cu)
                from . import q8

                q8.matmul(self, w, x, out, W, R, nt, bias, residual, softcap)
                return
            x = self._emulated(w, x)  # the gate's rounding alone (emulate_rounding)
            fn = self._k("qmatvec.cu", f"qmv<{w.fmt},{W},{R},{nt}>")
            self._launch(fn, (math.ceil(N / R),), 32 * W,
                         (*w.args(), x, _i32(K), _i32(N), _i32(T), NULL if bias is None else bias,
                          NULL if residual is None else residual, out, np.float32(softcap or 0.0)))
            return
        self._gemm(w, x, out, bias, residual, softcap)

    def matmul_norm_ahead(self, w: QWeight, x, *, out, residual, norm, eps: float):
        """out = x W^T + residual, whose rmsnorm(out) * norm the next op takes (norm_matmul_multi / ffn_glu with
        this norm and eps). With BW24_NORM_AHEAD, decode / verify rows on the q8 path run qmv8_na, which leaves
        that norm's int8 rows and sums of squares for the consumer (q8.na_plan: where); the mark says so to
        the very next op only. Otherwise matmul."""
        from . import q8

        T, K = x.shape
        plan = q8.na_plan(self, w, x, out, residual, norm)
        if plan is None:
            self.matmul(w, x, out=out, residual=residual)
            return
        W, R, nt = plan
        q8.matmul_na(self, w, x, out, W, R, nt, residual, norm)
        self._q8_ready = q8.na_mark(out, norm, eps)

    def _multi_plan(self, ws, K: int, gate_force: bool = True) -> tuple[bool, int, int]:
        """(q8, W, R) of a Q/K/V or gate/up launch: the first weight's config at the stacked shape, on the
        q8 path only when every weight's format has a q8 kernel (else all on the f32 path)."""
        from .launch import Q8_TYPES

        path, W, R = self.qmv_configs.plan(ws[0].qtype, sum(w.n for w in ws), K, gate_force)
        return path == "q8" and all(w.qtype.name in Q8_TYPES for w in ws), W, R

    def ffn_glu(self, h, norm, eps: float, w_gate, w_up, act, *, x, g, u):
        """Prefill rows (T > 16): gate and up as one stacked GEMM whose epilogue applies the GLU
        (prefill.gemm_multi, gemm_epilogue_glu: two epilogues and a glu launch fewer, the same bits).
        Decode / verify rows with BW24_GLU_GROUPS (q8.glu_plan: where): one qmv8_glu launch whose blocks own an int8
        group of g each, the GLU and g's int8 rows in their epilogue (no glu_q8 launch; the same bits), behind an
        rmsnorm, or reading the norm-ahead's rows that the matvec ahead left (as matmul_multi). Otherwise
        norm_matmul_multi, then glu. (Decode's front in one qmv_glu launch, BW24_GLU_FUSE, one warp a row of gate
        and up on the fp32 path, was measured slower at ca80b31, 988 vs 1128 tok/s on the 0.6B, and removed.)"""
        T, K = h.shape
        N = w_gate.n
        if T <= QMV_NT[-1]:
            from . import q8

            ws, plan = (w_gate, w_up), q8.glu_plan(self, (w_gate, w_up), h, g)
            na = self._q8_ready == q8.na_mark(h, norm, eps)
            fn = None if plan is None else q8.glu_kernel(self, ws, *plan, na)  # (None: its build spills)
            if fn is not None:
                if act not in ACTIVATIONS:
                    raise ValueError(f"activation {act!r} not in {ACTIVATIONS}")
                assert g.shape == u.shape == (T, N) and g.flags.c_contiguous and u.flags.c_contiguous
                if not na:  # (the norm-ahead's mark is for the very next launch: read before rmsnorm's)
                    self.rmsnorm(h, norm, eps, out=x)  # x and its int8 rows (rmsnorm_reg with xq: quantize skips)
                q8.matmul_glu(self, fn, ws, h if na else x, g, u, *plan[:2], ACTIVATIONS.index(act),
                              na_eps=float(eps) if na else None)
                return
        if T > QMV_NT[-1] and w_gate.k == w_up.k == K:  # prefill: the GLU in the stacked GEMM's epilogue
            from .prefill import gemm_multi

            if act not in ACTIVATIONS:
                raise ValueError(f"activation {act!r} not in {ACTIVATIONS}")
            assert g.shape == u.shape == (T, N) and w_up.n == N, f"ffn_glu: gate {w_gate.shape}, up {w_up.shape}"
            if not gemm_multi(self, (w_gate, w_up), h, (g, u), (None, None), norm=(norm, eps), glu=act):
                self.glu(g, u, act, out=g)
            return
        Ops.ffn_glu(self, h, norm, eps, w_gate, w_up, act, x=x, g=g, u=u)

    def qkv_rope_attention(self, h, norm, eps: float, ws, *, x, outs, biases, q, k, v, pos, k_cache, v_cache, rope,
                           attn):
        """Decode / verify rows with BW24_QKV_ROPE (q8.qkvr_plan: where): one qmv8_qkvr launch, a q or k head a block,
        whose epilogue does rope_kv's work (no rope_kv launch; the same bits), behind an rmsnorm or reading the
        norm-ahead's rows the matvec ahead left (as matmul_multi), then the attention. Otherwise Ops': Q/K/V, then
        rope_attention."""
        T, K = (h if norm is not None else x).shape
        if T <= QMV_NT[-1]:
            from . import q8

            plan = q8.qkvr_plan(self, ws, x, q, k_cache, v_cache)
            na = norm is not None and self._q8_ready == q8.na_mark(h, norm, eps)
            fn = None if plan is None else q8.qkvr_kernel(self, ws, q.shape[2], *plan, na, kv_elem(k_cache, v_cache))
            if fn is not None:
                if rope["mode"] not in ROPE_MODES:
                    raise ValueError(f"rope mode {rope['mode']!r} not in {ROPE_MODES}")
                check_qk_norm(rope.get("q_norm"), rope.get("k_norm"), rope.get("norm_eps"))
                for o in outs:
                    assert o.shape[0] == T and o.flags.c_contiguous
                if norm is not None and not na:  # (the norm-ahead's mark is for the very next launch)
                    self.rmsnorm(h, norm, eps, out=x)  # x and its int8 rows (rmsnorm_reg with xq: quantize skips)
                W, R, RV, _ = plan
                q8.matmul_qkvr(self, fn, ws, h if na else x, outs, biases or (None, None, None), pos, k_cache, v_cache,
                               rope, W, R, RV, na_eps=float(eps) if na else None)
                self.attention(q, k_cache, v_cache, pos, **attn)
                return
        Ops.qkv_rope_attention(self, h, norm, eps, ws, x=x, outs=outs, biases=biases, q=q, k=k, v=v, pos=pos,
                               k_cache=k_cache, v_cache=v_cache, rope=rope, attn=attn)

    def norm_matmul_multi(self, h, norm, eps: float, ws, *, x, outs, biases=None):
        """x = rmsnorm(h) * norm, then matmul_multi of x. On the fp32-activation path (the small models'
        K < Q8_MIN_K Q/K/V and gate/up) decode / verify rows are one qmv3n launch: every block normalizes its
        tokens' rows of h itself, one rmsnorm launch per use fewer (x is then left unwritten). Elsewhere
        (q8 weights, whose rmsnorm also writes the int8 rows; prefill) rmsnorm, then matmul_multi."""
        self.matmul_multi(ws, h, outs=outs, biases=biases, norm=(norm, eps, x))

    def matmul_multi(self, ws, x, *, outs, biases=None, norm=None):
        """Q/K/V or gate/up of one input in one launch (qmv3) when T <= 16 and K matches; the
        config (W, R) is that of the first weight at the stacked shape, for every T (same W).
        norm = (weight, eps, xbuf): x is the residual stream h, normalized first (norm_matmul_multi)."""
        def normed():  # the unfused norm: rmsnorm(h) into xbuf, which the matmuls then read
            nw, eps, xbuf = norm
            self.rmsnorm(x, nw, eps, out=xbuf)
            return xbuf

        T, K = x.shape
        biases = list(biases) if biases is not None else [None] * len(ws)
        assert x.flags.c_contiguous and x.dtype == np.float32
        for w, o in zip(ws, outs, strict=True):
            assert o.shape == (T, w.n) and o.flags.c_contiguous, f"matmul_multi: out {o.shape} for W {w.shape}"
        if T > QMV_NT[-1] and all(w.k == K for w in ws):  # prefill: x converted once per class
            from .prefill import gemm_multi

            gemm_multi(self, ws, x, outs, biases, norm=None if norm is None else norm[:2])  # the norm in x_to_half
            return
        if T > QMV_NT[-1] or not 2 <= len(ws) <= 3 or any(w.k != K for w in ws):
            return super().matmul_multi(ws, normed() if norm else x, outs=outs, biases=biases)
        q8, W, R = self._multi_plan(ws, K)
        if not q8 and self.emulating and self._multi_plan(ws, K, gate_force=False)[0]:
            x = self._rounded_copy(normed() if norm else x)  # the gate's rounding alone: normed, rounded, fp32 kernel
            norm = None
        nt, R = self._verify_plan("q8" if q8 else "f32", T, R, ws, K)
        parts = list(zip(ws, outs, biases, strict=True))
        if len(parts) == 2:
            parts.append((ws[1], outs[1], None))  # an empty third part (N2 = 0, no blocks)
        nb = [math.ceil(w.n / R) for w, _, _ in parts]
        nb[2] = nb[2] if len(ws) == 3 else 0
        from . import q8 as q8mod

        if q8 and norm is not None and self._q8_ready == q8mod.na_mark(x, norm[0], norm[1]):
            # the norm's rows left by the matvec ahead (matmul_norm_ahead): qmv8_3n
            q8mod.matmul_multi(self, parts, nb, x, W, R, nt, na_eps=float(norm[1]))
            return
        fused_norm = norm is not None and self.norm_fuse and not q8 and K % 4 == 0 and norm[0].shape == (K,)
        if norm is not None and not fused_norm:
            x = normed()
        if q8:
            q8mod.matmul_multi(self, parts, nb, x, W, R, nt)
            return
        fmts = ",".join(str(w.fmt) for w, _, _ in parts)
        if fused_norm:  # qmv3n: h, the norm weight and eps in front of qmv3's arguments
            fn = self._k("qmatvec.cu", f"qmv3n<{fmts},{W},{R},{nt}>")
            args = [x, norm[0], np.float32(norm[1]), _i32(K), _i32(T), _i32(nb[0]), _i32(nb[1])]
        else:
            fn = self._k("qmatvec.cu", f"qmv3<{fmts},{W},{R},{nt}>")
            args = [x, _i32(K), _i32(T), _i32(nb[0]), _i32(nb[1])]
        for i, (w, o, b) in enumerate(parts):
            args += [*w.args(), _i32(w.n if nb[i] else 0), NULL if b is None else b, o]
        self._launch(fn, (sum(nb),), 32 * W, tuple(args))

    # ---- launch-config hooks for the workbench sweeps (workbench/tune_qmatvec.py) ----------------
    def tuning_space(self, section: str, kind: str) -> dict:
        if section == "attention" and kind == "decode":
            from .attn import ATTN_SPACE

            return {k: list(v) for k, v in ATTN_SPACE.items()}
        if section != "qmatvec":
            raise ValueError(f"no tunable launch configs for section {section!r}")
        return {k: list(v) for k, v in QMV_SPACE.items()}

    def set_launch_config(self, section: str, kind: str, cfg: dict | None) -> None:
        """Force a config for one quant type, or for decode attention (None: back to the table/defaults)."""
        if section == "attention" and kind == "decode":
            from .attn import ATTN_SPACE

            if cfg is not None and any(cfg.get(k, v[0]) not in v for k, v in ATTN_SPACE.items()):
                raise ValueError(f"attention launch config {cfg!r} outside {ATTN_SPACE}")  # absent keys: the table's
            self.attn_override = dict(cfg) if cfg else None
            return
        if section != "qmatvec":
            raise ValueError(f"no tunable launch configs for section {section!r}")
        if cfg is None:
            self.qmv_configs.overrides.pop(kind, None)
        else:
            from .launch import check_config, check_path

            check_config(cfg)
            check_path(cfg)
            self.qmv_configs.overrides[kind] = dict(cfg)

    def _gemm(self, w: QWeight, x, out, bias, residual, softcap):
        """Prefill: y = x @ W^T through cuBLAS fp16 tensor-core GEMMs over dequantized row chunks of W
        (bounded scratch; precision and error: ops/cuda/prefill.py)."""
        from .prefill import gemm

        gemm(self, w, x, out, bias, residual, softcap)

    def rope_kv(self, q, k, v, pos, k_cache, v_cache, *, base, freq_scale, rope_dim, mode, q_norm=None,
                k_norm=None, norm_eps=None):
        if mode not in ROPE_MODES:
            raise ValueError(f"rope mode {mode!r} not in {ROPE_MODES}")
        check_qk_norm(q_norm, k_norm, norm_eps)
        _norm.rope_kv(self, q, k, v, pos, k_cache, v_cache, base=base, freq_scale=freq_scale, rope_dim=rope_dim,
                      mode=mode, q_norm=q_norm, k_norm=k_norm, norm_eps=norm_eps)  # qk-norm fused (ops/cuda/norm.py)

    def attention(self, q, k_cache, v_cache, pos, *, scale, softcap, window, out, n_keys=None):
        if q.shape[0] > 16:
            return self._attention_prefill(q, k_cache, v_cache, pos, scale=scale, softcap=softcap, window=window,
                                           out=out, n_keys=n_keys)
        T, H, D = q.shape
        Hkv, S, Dv = v_cache.shape
        assert k_cache.shape == (Hkv, S, D) and out.shape == (T, H, Dv)
        # split-K decode/verify kernels, geometry a function of S only (ops/cuda/attn.py)
        _attn.attention(self, q, k_cache, v_cache, pos, scale=scale, softcap=softcap, window=window, out=out)

    def _attention_prefill(self, q, k_cache, v_cache, pos, *, scale, softcap, window, out, n_keys=None):
        from . import attn_gemm, attn_mma
        from .prefill import attention  # flash-style causal kernel for T > 16 (kernels/attention_prefill.cu)

        # a chunk of a prefill graph (models/common.PrefillGraph, its eager first run too): one graph serves
        # every position, so the path is chosen without n_keys (mma wherever usable, else flash; never the
        # GEMMs, sized by n_keys). Keyed on the chunk, not on the backend's prefill_graphs: a forward that is
        # never captured (a MoE model's, the kernel-check cases) keeps the eager rules and their precision
        graphs = self.in_prefill_graph
        # the GEMM rule's "auto" choice: a chunk big enough that one of the tensor-core paths beats flash
        big = self.attn_gemm_auto and n_keys is not None and attn_gemm.worth_it(q.shape[0], q.shape[1], n_keys)
        mma = graphs or self.attn_mma or (self.attn_mma_auto and big and not self.attn_gemm)  # GEMM=1 wins auto
        if mma and attn_mma.usable(q, k_cache, v_cache):
            T, H, _ = q.shape
            Hkv, S, _ = k_cache.shape
            kspan = attn_mma.split_plan(T, H // Hkv, Hkv, S, _attn._sm_count()) if self.attn_mma_split else 0
            attn_mma.attention(self, q, k_cache, v_cache, pos, scale=scale, softcap=softcap, window=window, out=out,
                               kspan=kspan)
            return
        if not graphs and attn_gemm.usable(q, k_cache, v_cache, n_keys) and (self.attn_gemm or big):
            attn_gemm.attention(self, q, k_cache, v_cache, pos, scale=scale, softcap=softcap, window=window,
                                out=out, n_keys=n_keys)
            return
        attention(self, q, k_cache, v_cache, pos, scale=scale, softcap=softcap, window=window, out=out)

    def glu(self, gate, up, act, *, out):
        if act not in ACTIVATIONS:
            raise ValueError(f"activation {act!r} not in {ACTIVATIONS}")
        assert gate.shape == up.shape == out.shape
        n = out.size
        from . import q8

        if q8.fusable(out):  # decode/verify: quantize_x for the down projection fused in (glu_q8)
            q8.glu_q8(self, gate, up, ACTIVATIONS.index(act), out)
            return
        self._launch(self._k("elementwise.cu", "glu"), (min(math.ceil(n / 256), 4096),), 256,
                     (gate, up, out, np.int64(n), _i32(ACTIVATIONS.index(act))))

    def norm_moe(self, h, norm, eps, router, gate_exps, up_exps, down_exps, *, x, n_used, norm_weights, act, out,
                 residual=None):
        """With BW24_MOE_ROUTER_NORM, decode / verify rows in one router launch that also normalizes
        (ops/cuda/moe.py norm_router: where it applies); otherwise rmsnorm, then moe."""
        from .moe import moe, norm_router

        if norm_router(self, router, h, x, norm):
            moe(self, x, router, gate_exps, up_exps, down_exps, n_used=n_used, norm_weights=norm_weights, act=act,
                out=out, residual=residual, normed=(h, norm, eps))
            return
        Ops.norm_moe(self, h, norm, eps, router, gate_exps, up_exps, down_exps, x=x, n_used=n_used,
                     norm_weights=norm_weights, act=act, out=out, residual=residual)

    def moe(self, x, router, gate_exps, up_exps, down_exps, *, n_used, norm_weights, act, out, residual=None):
        from .moe import moe  # router top-k and selected-expert matvecs on the device (ops/cuda/moe.py)

        moe(self, x, router, gate_exps, up_exps, down_exps, n_used=n_used, norm_weights=norm_weights, act=act,
            out=out, residual=residual)

    def logits(self, x, w, softcap, *, out):
        self.matmul(w, x, out=out, softcap=float(softcap or 0.0))

    def advance(self, pos, n):
        self._launch(self._k("elementwise.cu", "advance"), (1,), 32, (pos, _i32(n)))

    def sample(self, logits, params, pos, *, out, counts=None):
        from .sampling import sample  # greedy and seeded draws on the device (ops/cuda/sampling.py)

        sample(self, logits, params, pos, out=out, counts=counts)

    # ---- memory planning and reporting (ops/cuda/memory.py) ---------------------------------------
    def prepare_model(self, f, cfg, *, n_ctx: int, max_batch: int, progress: bool = False) -> None:
        """Before any upload: check that the model fits in free VRAM (ModelDoesNotFitError if not) and
        open a progress bar in bytes for the uploads through the pinned staging buffer."""
        from . import memory
        from .overlap import SLOTS

        self._activation_policy(cfg)
        self._attention_policy(cfg)
        self._norm_policy(cfg)
        self._mem_baseline = memory.used_bytes()
        # with the overlap a GEMM call's chunks take SLOTS slots of PREFILL_SCRATCH each (prefill.chunk_slots)
        scratch = _prefill.PREFILL_SCRATCH * (SLOTS if self.prefill_overlap else 1)
        self._mem_plan = memory.plan(f, cfg, n_ctx, max_batch, scratch,
                                     _attn.plan_chunk(self.qmv_configs.tuning, n_ctx, cfg.n_head_kv),
                                     kv_bytes=np.dtype(self.kv_dtype).itemsize,
                                     logit_rows=self.logit_rows)
        memory.check_fit(self._mem_plan, str(getattr(f, "path", "model")), memory.device_free()[0])
        if progress:
            from tqdm.auto import tqdm

            self._upload_bar = tqdm(total=self._mem_plan.weights, unit="B", unit_scale=True, desc="upload (pinned)",
                                    leave=False, position=1)

    def model_loaded(self, model=None) -> None:
        bar = getattr(self, "_upload_bar", None)
        if bar is not None:
            bar.close()
            self._upload_bar = None

    def memory_report(self) -> str:
        from . import memory

        return memory.report(getattr(self, "_mem_plan", None), self.weight_bytes, getattr(self, "_mem_baseline", 0),
                             {k: int(a.nbytes) for k, a in self._scratch.items()}, self.scratch_peak)


__all__ = ["ATTN_SHAPES", "CudaOps"]
