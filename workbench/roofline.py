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
# # Roofline of this GPU
# The measured ceilings of `bw24-probe` (HBM read bandwidth, cuBLAS and mma.sync rates) as roofs,
# and every measured kernel as a point: the probe's own GEMM and each quantized matvec of the
# engine (from `bw24-probe matvec`). Nothing here is typed by hand: it all comes from the ceilings file.
# SMALL mode (no GPU): plots the committed ceilings of another device, labelled as such.

# %%
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from bw24.probe import ceilings
from bw24.probe.qdata import LAYOUTS
from bw24.runtime import has_gpu, no_gpu_reason

SMALL = os.environ.get("BW24_WB_SMALL") == "1" or not has_gpu()
OUT = Path(os.environ.get("BW24_WB_OUT") or Path.cwd() / "out")
OUT.mkdir(parents=True, exist_ok=True)
print("SMALL mode:", no_gpu_reason() or "BW24_WB_SMALL=1") if SMALL else print("GPU mode")

# %%
if SMALL:
    files = sorted(ceilings.PACKAGED_DIR.glob("*.json"))
    assert files, "no committed ceilings file to plot"
    c = ceilings.read_file(files[0])
    where = f"committed ceilings of {c.device} (not this machine)"
else:
    c = ceilings.load_current()
    where = f"{c.device}, measured {c.measured_at}"
r = c.results
print(where)
for k in ("hbm_read_gbs", "d2d_copy_gbs", "l2_read_gbs", "gemm_fp16_tflops", "gemm_bf16_tflops",
          "mma_fp16_tflops", "mma_int8_tops"):
    print(f"  {k:18s} {r.get(k, float('nan')):>10,.1f}")

# %% [markdown]
# Intensity of a T=1 quantized matvec: 2 FLOP per weight over the bytes of one weight
# (block bytes / block elements), so Q4_K (144 B / 256) sits at 3.6 FLOP/B, far left of every ridge.

# %%
points = []  # (label, intensity FLOP/B, achieved TFLOP/s)
n = 8192
if "gemm_fp16_tflops" in r:
    points.append((f"cuBLAS fp16 {n}^3", 2 * n**3 / (3 * n * n * 2), r["gemm_fp16_tflops"]))
for name, m in sorted(c.matvec.items()):
    qtype = next((q for q in LAYOUTS if name.startswith(f"matvec_{q}_")), None)
    if qtype is None:
        continue
    per, size, _ = LAYOUTS[qtype]
    ai = 2 * per / size
    points.append((name.removeprefix("matvec_"), ai, m["gbs"] * ai / 1e3))
if not c.matvec:
    print("no matvec points yet:", c.notes.get("matvec", "run `bw24-probe matvec` on the GPU"))

# %%
read = r["hbm_read_gbs"] / 1e3  # TB/s
ai = np.logspace(-1, 4, 300)
fig, ax = plt.subplots(figsize=(8, 5))
ax.loglog(ai, read * ai, "k-", lw=1.5, label=f"HBM read {r['hbm_read_gbs']:,.0f} GB/s")
if "l2_read_gbs" in r:
    ax.loglog(ai, r["l2_read_gbs"] / 1e3 * ai, "k:", lw=1, label=f"L2 read {r['l2_read_gbs']:,.0f} GB/s")
for k, style in (("gemm_fp16_tflops", "C0--"), ("mma_fp16_tflops", "C1--"), ("mma_int8_tops", "C2--")):
    if k in r:
        ax.axhline(r[k], color=style[:2], ls="--", lw=1, label=f"{k} {r[k]:,.0f}")
for label, x, y in points:
    ax.plot([x], [y], "o")
    ax.annotate(label, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
ax.set_xlabel("arithmetic intensity (FLOP / byte of HBM)")
ax.set_ylabel("TFLOP/s (TOP/s for int8)")
ax.set_title(f"roofline: {where}", fontsize=9)
ax.set_ylim(1e-2, 3e3)
ax.legend(fontsize=7, loc="lower right")
png = OUT / f"roofline-{c.key}.png"
fig.savefig(png, dpi=120, bbox_inches="tight")
assert png.stat().st_size > 10_000
print("wrote", png)
