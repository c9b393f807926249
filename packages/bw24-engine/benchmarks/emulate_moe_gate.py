"""What the routing pin takes out of a mixture of experts' run-gen gate, on the CPU (no GPU needed).

    python packages/bw24-engine/benchmarks/emulate_moe_gate.py [--layers 8] [--seeds 4] [--dir DIR]

Per seed: a synthetic qwen3moe (the qwen3moe-tiny preset with --layers layers, Q4_K_M) through the gate
(Engine.verify_prefill with the rounding alone measured) on ops/ref_int8.Int8RefOps with moe_q8 (x and h of
the experts rounded as cuda's BW24_MOE_Q8 rounds them, the attention projections too), once on the model's
own routing (pin_routing=False) and once pinned to the exact decode's (engine.routing_pin). Here the int8
decode is the emulation's arithmetic itself, so its drift equals its rounding alone; the batched prefill
differs from the decode only in summation order, so its drift shows what a routing flip does to one sample.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bw24.engine import Engine, engine
from bw24.engine.models import model_class
from bw24.engine.ops.ref_int8 import Int8RefOps
from bw24.gguf import GGUFFile, ModelConfig
from bw24.gguf.synth import synth
from bw24.gguf.synth.presets import PRESETS


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--dir", type=Path, default=None)
    a = ap.parse_args()
    engine.Q8_GATE_NMSE = 1e-15  # every forward held to its rounding alone, which is then always measured
    d = a.dir or Path(tempfile.mkdtemp())
    d.mkdir(parents=True, exist_ok=True)
    preset = PRESETS["qwen3moe-tiny"].with_layers(a.layers)
    print(f"{preset.name}: {preset.n_expert} experts, top-{preset.n_expert_used}; Int8RefOps(moe_q8) on the CPU")
    print(f"{'seed':>4} {'pin':>5} {'prefill':>9} {'decode':>9} {'alone':>9}  prefill/alone  result")
    for seed in range(a.seeds):
        path = d / f"{preset.name}-s{seed}.gguf"
        if not path.exists():
            synth(preset, path, mix="q4_k_m", seed=seed)
        f = GGUFFile(path)
        cfg = ModelConfig.from_gguf(f)
        for pinned in (False, True):
            ops = Int8RefOps(lambda w, k, e=cfg.n_embd: k >= e, moe_q8=True)
            eng = Engine(model_class(cfg.arch)(f, cfg, ops, n_ctx=128, max_batch=128), None, f, path, ops)
            r = eng.verify_prefill(list(range(3, 60)), pin_routing=pinned)
            p, dd = r.rounded
            print(f"{seed:>4} {'yes' if pinned else 'no':>5} {p.nmse:9.3g} {dd.nmse:9.3g} {r.alone:9.3g}  "
                  f"{p.nmse / r.alone:13.2f}  {'MATCH' if r.ok else 'MISMATCH'}" + (f"  ({r.routing})" if pinned else ""))


if __name__ == "__main__":
    main()
