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
# # Tune decode attention against context length
# Decode attention (T = 1, GQA) at growing context lengths: each config the engine declares
# (`ops.tuning_space("attention", "decode")`: split-K count, tile of keys per block, ...) is checked
# against a float64 softmax written out here, then timed; the table's `attention.decode` section gets
# one entry per context length. SMALL mode: reference backend, tiny heads and contexts, plumbing only.

# %%
import numpy as np
from _wb import SMALL, apply, backend, banner, candidates, device, tuning_dir
from bw24.probe import tuning

banner("tune_attention")
ops, note = backend()
TINY = SMALL or ops.name == "cpu"  # no cuda ops: reference backend, tiny shapes even on a GPU
print(note)
H, HKV, D = (4, 2, 16) if TINY else (32, 8, 128)
CTX = [8, 40] if TINY else [512, 2048, 8192, 32768]
S = max(CTX)
TOL = 1e-5 if ops.name == "cpu" else 2e-3
REPS = 20  # attention calls per timed graph replay (GPU)
rng = np.random.default_rng(3)

# %%
def attention_f64(q, kc, vc, n):
    """q [H, D], caches [HKV, S, D]; keys 0..n-1; query head h reads kv head h // (H / HKV)."""
    g = H // HKV
    out = np.empty((H, D))
    for h in range(H):
        k, v = kc[h // g, :n].astype(np.float64), vc[h // g, :n].astype(np.float64)
        s = k @ q[h].astype(np.float64) / np.sqrt(D)
        p = np.exp(s - s.max())
        out[h] = (p / p.sum()) @ v
    return out


kh = rng.standard_normal((HKV, S, D), dtype=np.float32)
vh = rng.standard_normal((HKV, S, D), dtype=np.float32)
kc, vc = ops.empty((HKV, S, D)), ops.empty((HKV, S, D))
ops.copy_from_host(kc, kh)
ops.copy_from_host(vc, vh)
q, out = ops.empty((1, H, D)), ops.empty((1, H, D))
pos = ops.empty((1,), np.int32)

rows, entries = [], {}
for n in CTX:
    qh = rng.standard_normal((1, H, D), dtype=np.float32)
    ops.copy_from_host(q, qh)
    ops.copy_from_host(pos, np.array([n - 1], np.int32))  # the query sits at position n-1: n keys
    ref = attention_f64(qh[0], kh, vh, n)

    graphs = {}

    def step(cfg):
        apply(ops, "attention", "decode", cfg)
        ops.attention(q, kc, vc, pos, scale=1 / np.sqrt(D), softcap=None, window=None, out=out)

    def run(cfg, graphs=graphs):
        """GPU: one captured graph of REPS launches per config (Python's launch cost out of the figure)."""
        key = str(sorted(cfg.items()))
        if key not in graphs:
            def many(cfg=cfg):
                for _ in range(REPS):
                    step(cfg)
            graphs[key] = ops.capture(many) if hasattr(ops, "capture") else many
            graphs[key]()  # eager first call; capture() records on its second call
        graphs[key]()

    def check(cfg, ref=ref):
        step(cfg)
        got = ops.to_host(out)[0]
        return bool(np.linalg.norm(got - ref) / np.linalg.norm(ref) < TOL)

    trials = tuning.sweep(candidates(ops, "attention", "decode"), check, run, ops.synchronize,
                          repeats=3 if TINY else 5, inner=3 if TINY else 5)
    assert trials[0].ok, f"ctx {n}: no config passed: {trials}"
    kv_bytes = 2 * HKV * n * D * 4
    sec = trials[0].seconds / REPS  # per attention call (a timed call runs REPS of them)
    rows.append((n, sec * 1e6, kv_bytes / sec / 1e9, trials[0].config))
    entries[str(n)] = trials[0].config

# %%
print(f"{'ctx':>7s} {'us':>9s} {'KV GB/s':>9s}  best config")
for n, us, g, cfg in rows:
    print(f"{n:7d} {us:9.1f} {g:9.2f}  {cfg}")
name, cc = device()
longest = entries[str(max(CTX))]
path = tuning.write_section(tuning_dir(ops), name, cc, "attention", {"decode": {"default": longest, "ctx": entries}},
                            {"notebook": "tune_attention.py", "backend": note, "small": TINY,
                             "shape": {"H": H, "Hkv": HKV, "D": D}})
assert tuning.read_table(path)["attention"]["decode"]["ctx"].items() >= entries.items()  # merged
print("wrote", path)
