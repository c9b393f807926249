# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Tune the quantized matvec per quant type
# For each quant type at the preset shapes: every launch config the engine declares
# (`ops.tuning_space("qmatvec", qtype)`) is checked against the dequantized float64 product, then
# timed; the fastest becomes that shape's entry of the per-device tuning table the engine's
# dispatcher loads (`bw24/engine/tuning/<device-key>.json`, section `qmatvec`).
# Timing (GPU): one CUDA graph per config replays COPIES matvecs, each over its own copy of the
# weight (the copies together > 2x the L2), so every weight byte comes from HBM and Python's launch
# cost is out of the figure; median of repeats. "Before" is the engine's built-in default config
# (what it runs with no table), "after" the fastest config that passed the float64 check.
# BW24_WB_QTYPES=Q4_K,Q6_K limits the quant types (device time is scarce); BW24_WB_SHAPES=25600x5120,...
# sweeps those N x K shapes instead (another model's: the 32B's matvecs, absent from the table, ran its
# decode at ~2 TB/s on the built-in default, b6232b5): they join the table as shape entries and each
# kind's default stays the one measured before.
# SMALL mode: the reference backend at tiny shapes; it has no launch knobs, so this exercises the
# check / sweep / write / reload path only and writes under BW24_WB_OUT.

# %%
import json
import os

import numpy as np
from _wb import SMALL, apply, backend, banner, candidates, device, tuning_dir
from bw24.gguf import TensorInfo
from bw24.probe import tuning
from bw24.probe.qdata import random_weight_bytes
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

banner("tune_qmatvec")
ops, note = backend()
TINY = SMALL or ops.name == "cpu"  # no cuda ops: reference backend, tiny shapes even on a GPU
print(note)
QTYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q4_K", "Q5_K", "Q6_K"]
QTYPES = [q for q in os.environ.get("BW24_WB_QTYPES", ",".join(QTYPES)).split(",") if q]
SHAPES = [(256, 512)] if TINY else [(4096, 4096), (1024, 4096), (12288, 4096), (4096, 12288), (151936, 4096)]
SHAPES_ENV = os.environ.get("BW24_WB_SHAPES", "")
if SHAPES_ENV:
    try:
        SHAPES = [tuple(int(v) for v in s.split("x")) for s in SHAPES_ENV.split(",") if s]
        assert SHAPES and all(len(s) == 2 and min(s) > 0 for s in SHAPES)
    except (ValueError, AssertionError):
        raise SystemExit(f"BW24_WB_SHAPES={SHAPES_ENV!r}: comma-separated NxK shapes, e.g. 25600x5120") from None
TOL = 1e-4 if ops.name == "cpu" else 2e-2  # cuda kernels may quantize the activation to int8
L2_BYTES = 60e6  # H200 L2 is 60 MB (bw24-probe reports it); copies cover 2x that
rng = np.random.default_rng(7)


def engine_default(qtype: str, n: int, k: int) -> dict | None:
    """The config the engine runs for this shape with no tuning table (None: backend has no knobs)."""
    if TINY:
        return None
    from bw24.engine.ops.cuda.launch import default_qmv

    return default_qmv(n, k)


# %%
results = {}   # qtype -> {shape: (trials, bytes per timed call, default config)}
for qtype in QTYPES:
    for n, k in SHAPES:
        raw = random_weight_bytes(qtype, n, k, rng)
        ti = TensorInfo(name=f"wb.{qtype}.{n}x{k}", qtype=GGMLQuantizationType[qtype], shape=(n, k), raw=raw,
                        nbytes=raw.nbytes, offset=0)
        copies = 1 if TINY else max(2, min(64, int(2 * L2_BYTES // raw.nbytes) + 1))
        ws = [ops.load_weight(TensorInfo(name=f"{ti.name}.{c}", qtype=ti.qtype, shape=ti.shape, raw=raw,
                                         nbytes=raw.nbytes, offset=0)) for c in range(copies)]
        xh = rng.standard_normal((1, k), dtype=np.float32)
        ref = (xh.astype(np.float64) @ dequantize(raw, ti.qtype).reshape(n, k).astype(np.float64).T)
        x, out = ops.empty((1, k)), ops.empty((1, n))
        ops.copy_from_host(x, xh)
        graphs = {}

        def check(cfg, ws=ws, x=x, out=out, ref=ref, qtype=qtype):
            apply(ops, "qmatvec", qtype, cfg)
            ops.matmul(ws[-1], x, out=out)
            got = ops.to_host(out)
            return bool(np.linalg.norm(got - ref) / np.linalg.norm(ref) < TOL)

        def run(cfg, ws=ws, x=x, out=out, qtype=qtype, graphs=graphs):
            key = json.dumps(cfg, sort_keys=True)
            if key not in graphs:  # one graph per config: the config picks the kernel at capture
                apply(ops, "qmatvec", qtype, cfg)

                def step(ws=ws):
                    for w in ws:
                        ops.matmul(w, x, out=out)
                graphs[key] = ops.capture(step) if hasattr(ops, "capture") else step
                graphs[key]()  # eager first call (capture() records on its second call)
            graphs[key]()

        trials = tuning.sweep(candidates(ops, "qmatvec", qtype), check, run, ops.synchronize,
                              repeats=3 if TINY else 5, inner=3 if TINY else 5)
        bad = [t for t in trials if not t.ok]
        assert trials[0].ok, f"{qtype} {n}x{k}: no config passed the check: {bad}"
        results.setdefault(qtype, {})[f"{n}x{k}"] = (trials, raw.nbytes * copies, engine_default(qtype, n, k))
        del ws, graphs

# %% [markdown]
# Before (the first declared config = the engine's default) and after (the fastest correct one).

# %%
print(f"{'qtype':6s} {'shape':>12s} {'before GB/s':>12s} {'after GB/s':>11s}  best config")
entries, before_after = {}, {}
for qtype, shapes in results.items():
    per_shape = {}
    for shape, (trials, nbytes, dflt) in shapes.items():
        first = candidates(ops, "qmatvec", qtype)[0]
        default = next((t for t in trials if t.config == dflt), None) or next(t for t in trials if t.config == first)
        best = trials[0]
        b, a = nbytes / default.seconds / 1e9, nbytes / best.seconds / 1e9
        before_after[f"{qtype} {shape}"] = {"before_gbs": round(b, 2), "after_gbs": round(a, 2)}
        per_shape[shape] = best.config
        print(f"{qtype:6s} {shape:>12s} {b:12.2f} {a:11.2f}  {best.config}")
    entries[qtype] = tuning.kind_entry(per_shape)

# %%
name, cc = device()
dest = tuning_dir(ops)
table = tuning.table_path(dest, name, cc)
had = tuning.read_table(table).get("qmatvec", {}) if table.is_file() else {}
if SHAPES_ENV:  # shapes only: a kind's default measured before stays (a kind new to the table takes one)
    entries = {q: {"shapes": e["shapes"]} if "default" in had.get(q, {}) else e for q, e in entries.items()}
path = tuning.write_section(dest, name, cc, "qmatvec", entries,
                            {"notebook": "tune_qmatvec.py", "backend": note, "small": TINY,
                             "before_after": before_after})
again = tuning.read_table(path)["qmatvec"]  # merged: shapes swept earlier (other models) stay
assert all(again[q]["default"] == e.get("default", had.get(q, {}).get("default"))
           and again[q]["shapes"].items() >= e["shapes"].items() for q, e in entries.items())
print("wrote", path)
