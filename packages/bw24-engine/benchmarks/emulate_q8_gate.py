"""What int8 activations do to a model's last-position logits, on the CPU (no GPU needed).

    python packages/bw24-engine/benchmarks/emulate_q8_gate.py MODEL.gguf [MODEL.gguf ...]

Per model: the run-gen gate (Engine.verify_prefill) on ops/ref_int8.Int8RefOps (the NumPy reference
rounding activations exactly where and how the cuda q8 path does), i.e. the exact-activation prefill vs
decode maxdiff and the int8 prefill / decode NMSE against the exact decode, then the same with a planted
bug (the int8 decode drops each matvec's last 32-column group). Numbers behind engine.Q8_GATE_NMSE
(docs/gates.md "The run-gen gate on int8-activation models").
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from bw24.engine import Engine
from bw24.engine.models import model_class
from bw24.engine.ops.ref_int8 import DropLastGroupInDecode, Int8RefOps
from bw24.gguf import GGUFFile, ModelConfig, resolve_model
from bw24.tokenizer import Tokenizer

PROMPT = ('def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n        return n\n'
          "    return")


def main(paths: list[str]) -> None:
    for name in paths:
        path = Path(resolve_model(name))
        f = GGUFFile(path)
        cfg, tok = ModelConfig.from_gguf(f), Tokenizer.from_gguf(f)
        for ops in (Int8RefOps(), DropLastGroupInDecode()):
            t = time.perf_counter()
            eng = Engine(model_class(cfg.arch)(f, cfg, ops, n_ctx=256, max_batch=128), tok, f, path, ops)
            ids = eng.tokenizer.encode(PROMPT, add_special=True)
            r = eng.verify_prefill(ids)
            tag = "canary (decode drops a group)" if isinstance(ops, DropLastGroupInDecode) else "int8 as cuda"
            print(f"{eng.path.name} [{tag}] {len(ids)} tokens, {ops.rounded} rounded matmuls, "
                  f"{time.perf_counter() - t:.0f} s: {r.line()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
