"""Launch configs of the decode/verify matvec (qmv / qmv3 in kernels/qmatvec.cu).

A config is {"warps": W, "rows": R[, "path": "f32" | "q8"]}: W warps per block split K (threads walk groups g = i, i+32W..),
R rows per block share each activation load. Sources, first match wins: an override set by a
workbench sweep (set_launch_config), the device's tuning table (bw24/engine/tuning/<key>.json,
shape "NxK" then the quant type's default), then built-in defaults (default_qmv).
W fixes the summation order of a row, so a weight is always launched with one W whatever T is;
R only changes how rows are grouped; a T > 1 launch takes its R from f32_verify_rows (registers: R*NT accumulators).
"path" picks the kernel family: "f32" (qmv: fp32 activations) or "q8" (qmv8 in qmatvec_q8.cu:
activations quantized to int8 per 32-group, dp4a). The path is a policy of the weight's shape
(default_path), not of the table: the prefill GEMM rounds its activations exactly as the q8 path
quantizes them for the same weights (ops/cuda/prefill.py), so prefill and decode stay consistent
(the run-gen gate) whatever (W, R) the table picks. Only a workbench override may force a path.
A q8 request for a format the q8 kernels lack (F32/F16/BF16) falls back to "f32".
"""

from __future__ import annotations

import os
from pathlib import Path

from gguf.constants import GGMLQuantizationType as Q

# The per-device tables (bw24.probe writes them). BW24_TUNING_DIR=PATH reads this device's table from PATH instead (an
# A/B against another table, e.g. evidence/tuning_h200_4f3a865/, the table before the loads; perf rows then record "tuning_dir").
TUNING_DIR_ENV = os.environ.get("BW24_TUNING_DIR")  # (read once: for_device's check and the perf rows' label use it)
TUNING_DIR = Path(TUNING_DIR_ENV or Path(__file__).resolve().parents[2] / "tuning")
QMV_SPACE = {"warps": [1, 2, 4, 8], "rows": [1, 2, 4, 8, 16]}
PATHS = ("f32", "q8")
Q8_TYPES = frozenset(q.name for q in (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q4_K, Q.Q5_K, Q.Q6_K))


# Below this many rows a weight's blocks take one row each (a MoE router: 128 rows): R rows a block left
# such a launch with N / R blocks for 132 SMs (32 for the 30B-A3B's router, a stage of every layer's
# dependency chain). R never changes a row's bits (the summation order depends on W and K only).
SMALL_N = 1024


# Rows per block of a T > 1 (speculative verify) fp32-activation matvec. H200 sweep at a6dcfe3
# (evidence/verify_sweep_h200_a6dcfe3_f32.log: the 0.6B's and qwen2.5-coder-1.5b's shapes, K = 1024 and 1536,
# T = 2..9, every config first checked bit-identical to T = 1 launches): Q4_K is fastest at R = 4 at every
# shape and T (T = 5: 2.2-3.9x a decode launch, against 5.0-8.7x at R = 1, the rule until then); Q6_K at R = 2
# (R = 4 loses from T = 8 on: 340 vs 155 us on the 1.5b's gate+up). A launch with a Q6_K part (a Q/K/V with a
# Q6_K V) takes 2. Other formats, unswept, and K < 1024 keep R = 1: smollm2's (K = 576) T = 5 verify ran
# slower with its decode R (1.84 -> 2.35 ms, d294954).
F32_VERIFY_MIN_K = 1024


def f32_verify_rows(qtypes, k: int) -> int:
    """R of a T > 1 fp32-activation matvec launch over weights of these quant types (rows K long)."""
    names = {q.name for q in qtypes}
    if k < F32_VERIFY_MIN_K or not names <= {"Q4_K", "Q6_K"}:
        return 1
    return 2 if "Q6_K" in names else 4


def default_qmv(n: int, k: int) -> dict:
    """Built-in default (first H200 sweep, evidence/matvec_sweep_h200_run1.txt): K >= 3072 wants
    4 warps splitting K and many rows sharing each activation load; K = 1024 one warp, 4 rows; fewer
    than SMALL_N rows, one row a block."""
    g = k // 32
    return {"warps": 4 if g >= 96 else 1, "rows": 1 if n < SMALL_N else 8 if g >= 128 else 4}


def check_config(cfg: dict) -> tuple[int, int]:
    w, r = cfg.get("warps"), cfg.get("rows")
    if w not in QMV_SPACE["warps"] or r not in QMV_SPACE["rows"]:
        raise ValueError(f"qmatvec launch config {cfg!r}: warps must be in {QMV_SPACE['warps']}, "
                         f"rows in {QMV_SPACE['rows']}")
    return int(w), int(r)


# q8 where the H200 sweep (evidence/matvec_q8_sweep_h200_*.txt) shows the f32 path instruction-bound:
# K >= 2048 (8B-class layers: 1.8-2x the f32 path's GB/s) and vocabulary heads (N >= 100k: 2x);
# narrower layers (K = 576..1536, the small real models) looked launch-bound either way and kept fp32
# activations, so the small real models' GPU output stayed that of the fp32 CPU reference.
# That sweep timed eager launches (a ~4 us floor: 4096 x 1024 took 4.0 us on either path); the graphs' profile
# since (a6dcfe3, BW24_PDL=0) has the 0.6B's K = 1024 Q/K/V and gate/up on the fp32 path (qmv3) at 5.4-6.3 us a
# launch, 313 of its 959 us of kernels a token, against 2.2-2.4 us for its q8 matvecs of 2048-3072 columns.
# So K >= 1024 since the H200 run at 6e0baa5: with it the 0.6B decoded 1,281 / 1,004 tok/s at d0 / d4096
# against 1,118 / 913 at 2048 (one session), its gate MATCH at 1.13x its rounding alone; the rmsnorm ahead of
# those matvecs leaves their int8 codes too (q8.feeds_q8), and the gate holds them to the int8 half's bound as
# every q8 weight. smollm2 (K = 576) and qwen2.5-0.5b (896) keep fp32 activations. BW24_Q8_MIN_K=N measures
# another threshold (a multiple of 32; perf rows record "q8_min_k_N").
Q8_MIN_K_DEFAULT = 1024


def q8_min_k(env: str | None) -> int:
    """BW24_Q8_MIN_K's value (None: the default), refused unless a positive multiple of 32 (the q8 group)."""
    if env is None:
        return Q8_MIN_K_DEFAULT
    try:
        k = int(env)
    except ValueError:
        k = 0
    if k <= 0 or k % 32:
        raise ValueError(f"BW24_Q8_MIN_K={env!r}: give a positive multiple of 32 (the default is {Q8_MIN_K_DEFAULT})")
    return k


Q8_MIN_K = q8_min_k(os.environ.get("BW24_Q8_MIN_K"))
Q8_MIN_N = 100_000
# A speculative draft model (Engine.load(draft=True): CudaOps.use_draft_policy) takes int8 activations at every K
# (one q8 group): its arithmetic sets the acceptance only, the target's verify keeps the output exact, so no gate
# holds it to the fp32 reference. On the H200 at eae1eee the real pair's draft (qwen2.5-coder-0.5b, K = 896 and
# 4,864) decoded 772-1,200 tok/s on int8 activations against 727-858 with its K = 896 layers on fp32 ones, and the
# pair ran 0.63 / 0.77 / 0.79x the 1.5b's plain decode against 0.50 / 0.58 / 0.62x (acceptance 0.56 / 0.77 / 0.80
# against 0.56 / 0.72 / 0.80; evidence/spec_bench_h200_eae1eee_pair{,_q8_min_k_896}.txt). BW24_DRAFT_Q8=0: a
# draft takes the target's rule (perf / spec rows "no_draft_q8").
DRAFT_Q8_MIN_K = 32


def default_path(name: str, n: int, k: int, min_k: int | None = None) -> str:
    """The path of a weight [n, k] of type name: q8 from min_k columns (None: Q8_MIN_K) and for vocabulary heads."""
    return "q8" if name in Q8_TYPES and (k >= (Q8_MIN_K if min_k is None else min_k) or n >= Q8_MIN_N) else "f32"


def check_path(cfg: dict) -> str:
    p = cfg.get("path", "f32")
    if p not in PATHS:
        raise ValueError(f"qmatvec launch config {cfg!r}: path must be one of {PATHS}")
    return str(p)


class QmvConfigs:
    """Resolves (quant type, N, K) -> (W, R) for this device."""

    def __init__(self, tuning=None):
        from bw24.runtime import Tuning

        self.tuning = tuning if tuning is not None else Tuning()
        self.overrides: dict[str, dict] = {}
        self.force_path: str | None = None  # every weight on this path (CudaOps.exact_activations)
        # every weight but a vocabulary head (N >= Q8_MIN_N) on the fp32 path: mixture-of-experts models
        # (CudaOps.use_int8_activations(False)); the head feeds no router, only the logits
        self.f32_body = False
        self.min_k = Q8_MIN_K  # q8 from this many columns (default_path); DRAFT_Q8_MIN_K for a draft model

    @classmethod
    def for_device(cls, warn=None) -> QmvConfigs:
        from bw24.runtime import device_info, device_key, load_tuning

        d = device_info()
        key = device_key(d.name, d.cc)
        if TUNING_DIR_ENV and not (TUNING_DIR / f"{key}.json").is_file():
            # an A/B against a table that is not there would run the built-in defaults under that name
            raise ValueError(f"BW24_TUNING_DIR={TUNING_DIR_ENV!r} has no {key}.json for this device")
        return cls(load_tuning(TUNING_DIR, key, warn=warn))

    def _entry(self, name: str, n: int, k: int) -> dict:
        """The config of a weight of type name [n, k]: a workbench override, else the table's, else default_qmv."""
        return self.overrides.get(name) or self.tuning.config("qmatvec", name, f"{n}x{k}") or default_qmv(n, k)

    def loads(self, qtype, n: int, k: int) -> int:
        """The decode q8 matvec's row-groups loaded at once for this weight (kernels/qmatvec_q8.cu QMV8_DECODE_LOADS):
        the entry's "loads" (one of q8.QMV8_LOADS; any other value, or none, 0: the loop as before). A workbench
        override's entry wins, as for (W, R)."""
        from .q8 import QMV8_LOADS

        v = self._entry(Q(int(qtype)).name, n, k).get("loads", 0)
        return int(v) if v in QMV8_LOADS else 0

    def get(self, qtype, n: int, k: int) -> tuple[int, int]:
        return self.plan(qtype, n, k)[1:]

    def plan(self, qtype, n: int, k: int, gate_force: bool = True) -> tuple[str, int, int]:
        """(path, W, R) for this weight; "q8" only for formats the q8 kernels implement. gate_force=False:
        the path the backend's own forwards take, whatever force_path (the gate's exact half) says."""
        name = Q(int(qtype)).name
        cfg = self._entry(name, n, k)
        forced = ((self.force_path if gate_force else None)
                  or self.overrides.get(name, {}).get("path")  # gate / workbench sweep
                  or ("f32" if self.f32_body and n < Q8_MIN_N else None))
        try:
            w, r = check_config(cfg)
            check_path(cfg)  # a corrupt path in the table voids the entry (validated, then unused)
            path = check_path({"path": forced}) if forced else default_path(name, n, k, self.min_k)
        except ValueError:  # a table entry outside the kernel's space: defaults, never a crash
            (w, r), path = check_config(default_qmv(n, k)), default_path(name, n, k, self.min_k)
        return ("q8" if path == "q8" and name in Q8_TYPES else "f32"), w, r
