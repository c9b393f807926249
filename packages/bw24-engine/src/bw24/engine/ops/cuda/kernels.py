"""Where the .cu files live, which template instances each op uses, and loading them on the GPU.

`COMPILE_SET` lists, per kernel file, the template instances the engine launches for the real
models and synthetic presets; the compile-only stage (no GPU) and the CI test build exactly these.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from .attn_mma import instances as attn_mma_instances
from .moe import decode_instances
from .moe_prefill import mm_instances
from .prefill import attn_instances

KERNEL_DIR = Path(__file__).resolve().parents[2] / "kernels"
QMV_NT = (1, 4, 8, 16)   # token-count buckets of the decode/verify matvec (T <= 16); 8: a K=4..7 verify
# (W warps, R rows) of the decode matvec that CI compiles: the built-in defaults at the presets' K
# and the H200 table's choices; other configs compile at run time on first use.
QMV_CONFIGS = ((4, 8), (1, 4), (4, 4), (4, 16), (2, 4), (1, 2))
ATTN_SHAPES = ((64, 64, 3), (64, 64, 7), (128, 128, 4), (128, 128, 8), (256, 256, 4), (128, 128, 2),
               (128, 128, 1), (64, 64, 1), (64, 64, 5), (64, 64, 6))
ATTN_CHUNKS = (32, 64)  # attn_split CH choices (ops/cuda/attn.py; the tuning table picks among them)
NORM_NV = (1, 2, 4, 8, 16)  # rmsnorm_reg<VW, NV> values per thread (ops/cuda/norm.py)

COMPILE_SET: dict[str, tuple[str, ...]] = {
    "qmatvec.cu": tuple(f"qmv<{f},{w},{r},1>" for f in (3, 4, 7, 9) for w, r in QMV_CONFIGS[:4])
    + tuple(f"qmv<{f},{w},2,1>" for f in (0, 1, 2, 5, 6, 8) for w in (1, 4))
    + tuple(f"qmv<{f},4,1,{nt}>" for f in (3, 7, 9) for nt in QMV_NT[1:])
    # verify rows of the fp32 path (launch.f32_verify_rows): Q4_K 4 rows, Q6_K (or a Q6_K part) 2; the 0.6B's
    # (W = 1) and qwen2.5-coder-1.5b's (W = 4) Q/K/V and gate/up, the 1.5b's wo, in the 8 bucket (K = 4..7
    # drafts; the other buckets compile on first use: these are the slowest instances to build)
    + tuple(f"qmv<{f},4,{r},8>" for f, r in ((7, 4), (9, 2)))
    + tuple(f"qmv3<7,7,{f},{w},{r},8>" for f, w, r in ((7, 1, 4), (9, 1, 2), (9, 4, 2)))
    + ("qmv3<7,7,7,4,8,1>", "qmv3<7,7,9,4,8,1>", "qmv3<3,3,3,4,8,1>", "qmv3<4,4,4,4,8,1>", "qmv3<7,7,7,1,4,1>")
    # the input RMSNorm inside (norm_matmul_multi): the 0.6B's Q/K/V and gate/up, smollm2's, a verify bucket
    + ("qmv3n<7,7,7,1,4,1>", "qmv3n<7,7,9,1,4,1>", "qmv3n<3,3,3,4,8,1>", "qmv3n<7,7,7,1,1,8>", "qmv3n<3,3,3,4,1,8>")
    + tuple(f"dequant_rows<{f}>" for f in range(10)),
    # q8 path (off until the tuning table selects it): the built-in (W, R) defaults per format and NT;
    # when the table picks other q8 configs, add them here so CI compiles what is dispatched.
    "qmatvec_q8.cu": tuple(f"qmv8<{f},{w},{r},1>" for f in (3, 4, 5, 6, 7, 8, 9) for w, r in QMV_CONFIGS[:2])
    # verify (T > 1): NT = T up to 8 with q8.verify_rows(T) = 4 rows, then the 16 bucket with 2
    + tuple(f"qmv8<{f},4,{r},{nt}>" for f in (3, 4, 5, 6, 7, 8, 9) for nt, r in ((2, 4), (5, 4), (16, 2)))
    + ("qmv8_3<7,7,9,4,8,1>", "qmv8_3<3,3,3,4,8,1>", "qmv8_3<4,4,4,4,8,1>",
       "qmv8_3<7,7,9,4,4,5>", "qmv8_3<7,7,7,4,4,4>")
    # BW24_NORM_AHEAD (q8.na_plan): the 8B's wo and down projections (decode, a 5-token verify), its gate/up after them
    + ("qmv8_na<7,2,4,1>", "qmv8_na<9,1,1,1>", "qmv8_na<7,2,2,1>", "qmv8_na<7,2,4,5>", "qmv8_3n<7,7,7,2,4,1>")
    # BW24_GLU_GROUPS (q8.glu_plan): the 0.6B's gate/up behind its norm-ahead (decode, a 5-token verify), the 8B's
    + ("qmv8_glu<7,1,4,1,true>", "qmv8_glu<7,1,4,5,true>", "qmv8_glu<7,2,4,1,false>", "qmv8_glu<3,4,8,1,false>")
    # BW24_QKV_ROPE (q8.qkvr_plan): the 0.6B's Q/K/V with the rope (a Q4_K or Q6_K v; behind its norm-ahead, and layer
    # 0's behind an rmsnorm), the float16 cache
    + ("qmv8_qkvr<7,7,9,128,1,8,4,1,true,__half>", "qmv8_qkvr<7,7,7,128,1,8,4,1,true,__half>",
       "qmv8_qkvr<7,7,9,128,1,8,4,1,false,__half>"),
    # + extern "C" quantize_x, glu_q8, round_x_q8
    "attention.cu": tuple(f"attn_split<{d},{dv},{g},{ATTN_CHUNKS[0]}{kt}>" for d, dv, g in ATTN_SHAPES
                          for kt in ("", ",__half"))  # fp32 and fp16 KV caches
    + tuple(f"attn_split<128,128,{g},{c}>" for g in (2, 4, 8) for c in ATTN_CHUNKS[1:]),  # table choices
    "norm.cu": tuple(f"rmsnorm_reg<{vw},{nv}>" for vw in (1, 4) for nv in NORM_NV),  # (+ fused quantize_x)
    "rope.cu": ("rope_kv<float>", "rope_kv<__half>"),  # the KV-cache element
    "elementwise.cu": (),
    "readback.cu": (),  # the step's token into mapped host memory (ops/cuda/readback.py TokenRing)
    "sample.cu": (),
    "spec.cu": (),  # speculative verify: per-row argmax (ops/cuda/spec.py)
    "attention_gemm.cu": (),  # prefill attention's softmax rows around cuBLAS GEMMs (ops/cuda/attn_gemm.py)
    "attention_mma.cu": attn_mma_instances(),  # prefill attention on tensor cores (ops/cuda/attn_mma.py)
    # decode / verify pass 1 on tensor cores past BW24_ATTN_DEC_MMA live keys (ops/cuda/attn.py dec_mma_from):
    # the qwen3 shapes (2, 4 and 8 q heads a kv head), qwen2.5's (7) and smollm2's (3)
    "attention_dec_mma.cu": tuple(f"attn_dec_mma<{d},{d},{g},{ATTN_CHUNKS[0]}>" for d, g in
                                  ((128, 2), (128, 4), (128, 8), (64, 7), (64, 3))),
    # decode: fused gate/up/act and down/combine per weight format (ops/cuda/moe.py decode_config);
    # moe_mv per format for the fallbacks (gate and up of different formats, rows too long to stage)
    "moe.cu": decode_instances() + tuple(f"moe_mv<{f}>" for f in range(10))
              + tuple(f"moe_router_norm<{nv}>" for nv in NORM_NV),  # (its block: rmsnorm_reg<4, NV>'s threads)
    # prefill (T > 16, ops/cuda/prefill.py): fp16 weight chunks for cuBLAS; attention at the real
    # models' (D, G) (smollm2 64/3, qwen2.5 64/7, qwen3 128/2,4,8, gemma3 256/4) and kernel_check's
    "prefill_gemm.cu": tuple(f"dequant_rows_h<{f}>" for f in range(10)),
    # MoE prefill as grouped GEMMs on the device's routing (BW24_MOE_GROUPED, ops/cuda/moe_prefill.py
    # grouped_ffn): gate/up (GLU) and down per weight format (+ extern "C" moe_group)
    # at each KG (32-column groups a stage, BW24_MOE_MM_KG: moe_prefill.MM_KG)
    "moe_mm.cu": mm_instances(),
    "attention_prefill.cu": sum((attn_instances([(64, 64, g) for g in (1, 3, 5, 7)]
                                                + [(128, 128, g) for g in (1, 2, 4, 6, 8)]
                                                + [(256, 256, g) for g in (2, 4)], half=h) for h in (False, True)), ()),
}


def kv_elem(k_cache, v_cache) -> str:
    """The KV-cache element the kernels are instantiated for: "float" or "__half" (rope_kv<KT>);
    attn_split / attn_prefill default KT = float, so their names carry only ",__half"."""
    assert k_cache.dtype == v_cache.dtype, f"K cache {k_cache.dtype}, V cache {v_cache.dtype}"
    return "__half" if k_cache.dtype == "float16" else "float"


def kv_arg(k_cache, v_cache) -> str:
    """The trailing template argument of attn_split / attn_prefill: "" (float) or ",__half"."""
    return "" if kv_elem(k_cache, v_cache) == "float" else ",__half"


def kernel_files() -> list[Path]:
    return sorted(KERNEL_DIR.glob("*.cu"))


@functools.cache
def names_macro(file: str, macro: str) -> bool:
    """Whether kernels/<file>, or any header beside it (which it may include), mentions `macro`."""
    return any(macro in p.read_text() for p in [KERNEL_DIR / file, *sorted(KERNEL_DIR.glob("*.cuh"))])


# A file each process appends the modules it loads to, one JSON line each (file, name expressions, defines), when
# set: the GPU host's kernel-check and GPU pytest record theirs (h200_session.sh), and warm_kernels.py compiles the
# committed record (benchmarks/kernel_manifest_h200.jsonl) on every core before the next session's chain. Why: the
# canaries' planted variants and the opt-ins' builds are compiled one NVRTC run after another where those
# stages first ask for them (the contract stage took 7.0 of the 30 device minutes at 5b56e32).
MANIFEST_ENV = "BW24_KERNEL_MANIFEST"


def record_module(file: str, names: tuple[str, ...], defines: tuple[tuple[str, object], ...]) -> None:
    """Append one module to $BW24_KERNEL_MANIFEST (nothing when unset): one O_APPEND write a line, so
    processes recording at once (kernel-check beside pytest) do not interleave their lines."""
    path = os.environ.get(MANIFEST_ENV)
    if not path:
        return
    line = json.dumps({"file": file, "names": list(names), "defines": sorted([k, v] for k, v in defines)})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@functools.cache
def get_kernel(file: str, name: str, defines: tuple[tuple[str, object], ...] = ()):
    """A launchable cupy RawKernel for `name` (a plain extern "C" name or a template instance) of
    kernels/<file>, compiled for this GPU (cached in memory and on disk). Needs a GPU."""
    from bw24.runtime import load_module

    ne = (name,) if "<" in name else ()
    record_module(file, ne, defines)
    return load_module(KERNEL_DIR / file, defines=dict(defines), name_expressions=ne).get(name)
