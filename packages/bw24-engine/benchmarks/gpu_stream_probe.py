"""How fast one short kernel streams the 8B's decode-attention cache at 4,096 keys (16 MiB) when it does nothing else
(benchmarks/stream_probe.cu, why there): the access shape of the attention's pass 1 (264 blocks of 4 warps, two
32 KB tiles a block in flight at once) and the shapes around it, against the same bytes by plain loads.

    python gpu_stream_probe.py OUTDIR

Each config reads one of COPIES copies of the region a launch (more than 2x the L2 in all, so every byte comes from
HBM), R launches in a CUDA graph; its per-launch time is the replays' median over R, less the empty kernel's (the
graph's gap between launches, reported beside it). Each config's checksum is checked against the host's first.
Writes OUTDIR/stream_probe.json; prints a short table last.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REGION = 8 * 4096 * 2 * 256  # bytes: 8 kv heads x 4,096 keys x (K + V) rows of 128 halves
CHUNK = 16
COPIES = 10  # 160 MiB: past 2x the H200's L2
R = COPIES  # launches a graph, one a copy


@dataclass(frozen=True)
class Config:
    """One way to read REGION: `kernel` (stream_all / stream_ring2 / stream_ldg / stream_empty) over `blocks` blocks of
    `threads`, each `tiles` tiles of `tile_kb` KiB. `note` says which of the attention's shapes it stands for."""

    name: str
    kernel: str
    threads: int
    tiles: int
    tile_kb: int
    note: str = ""

    @property
    def tile_chunks(self) -> int:
        return self.tile_kb * 1024 // CHUNK

    @property
    def blocks(self) -> int:
        return REGION // (self.tiles * self.tile_kb * 1024)

    @property
    def smem(self) -> int:
        """Dynamic shared memory bytes a block."""
        n = {"stream_all": self.tiles, "stream_ring2": 2}.get(self.kernel, 0)
        return n * self.tile_chunks * CHUNK


CONFIGS = (
    Config("pass 1: 2 tiles all at once", "stream_all", 128, 2, 32, "attn_dec_mma at 33 splits (4,096 keys)"),
    Config("2 tiles all at once, 8 warps", "stream_all", 256, 2, 32, "twice the warps a block"),
    Config("1 tile", "stream_all", 128, 1, 32, "66 splits"),
    Config("4 tiles through 2 stages", "stream_ring2", 128, 4, 32, "16 splits with the pipe"),
    Config("4 tiles all at once", "stream_all", 128, 4, 32, "16 splits, one block an SM"),
    Config("1 tile of 16 KB", "stream_all", 128, 1, 16, "1,024 blocks"),
    Config("plain loads, 32 KB a block", "stream_ldg", 128, 1, 32, "the matvecs' way"),
    Config("plain loads, 16 KB a block", "stream_ldg", 128, 1, 16, ""),
    Config("plain loads, 8 KB a block, 8 warps", "stream_ldg", 256, 1, 8, ""),
    Config("plain loads, 64 KB a block", "stream_ldg", 128, 1, 64, "as pass 1's blocks"),
    Config("empty kernel", "stream_empty", 128, 1, 32, "the launch gap, subtracted"),
)


def check_configs(configs=CONFIGS) -> None:
    """Every config covers REGION exactly and fits a block's shared memory (227 KB on sm_90)."""
    for c in configs:
        if c.blocks * c.tiles * c.tile_chunks * CHUNK != REGION:
            raise ValueError(f"stream probe config {c.name!r} does not tile {REGION} bytes")
        if c.smem > 227 * 1024 or c.threads % 32:
            raise ValueError(f"stream probe config {c.name!r}: {c.smem} bytes of shared memory a block (227 KB at "
                             f"most) or {c.threads} threads (whole warps)")


def main(out: Path) -> int:
    import cupy as cp
    from bw24.runtime import describe, load_module, new_stream
    from bw24.runtime.launch import allow_dynamic_shared

    check_configs()
    out.mkdir(parents=True, exist_ok=True)
    mod = load_module(HERE / "stream_probe.cu")
    s = new_stream()
    words = REGION // 4
    rng = np.random.default_rng(0)
    buf = cp.asarray(rng.integers(0, 2**32, size=COPIES * words, dtype=np.uint32))
    want = int(cp.asnumpy(buf[:words]).astype(np.uint64).sum()) % 2**32
    acc = cp.zeros(1, np.uint64)
    rows, lines = [], []

    def launch(c: Config, fn, copy: int):
        src = buf[copy * words:(copy + 1) * words]
        fn((c.blocks,), (c.threads,), (src, np.int32(c.tile_chunks), np.int32(c.tiles), acc), shared_mem=c.smem)

    for c in CONFIGS:
        fn = mod.get(c.kernel)
        allow_dynamic_shared(fn, c.smem)
        with s:
            acc.fill(0)
            launch(c, fn, 0)
        s.synchronize()
        got = int(acc.get()[0]) % 2**32
        checked = c.kernel == "stream_empty" or got == want
        if not checked:
            lines.append(f"{c.name}: checksum {got} != {want}: not timed")
            rows.append({**asdict(c), "blocks": c.blocks, "checked": False})
            continue
        s.begin_capture()
        with s:
            for i in range(R):
                launch(c, fn, i % COPIES)
        g = s.end_capture()
        g.upload(s)
        ev0, ev1, times = cp.cuda.Event(), cp.cuda.Event(), []
        for _ in range(7):
            ev0.record(s)
            g.launch(s)
            ev1.record(s)
            ev1.synchronize()
            times.append(cp.cuda.get_elapsed_time(ev0, ev1) * 1e3 / R)
        rows.append({**asdict(c), "blocks": c.blocks, "smem": c.smem, "checked": True, "us": float(np.median(times))})
    gap = next((r["us"] for r in rows if r["kernel"] == "stream_empty" and r.get("checked")), 0.0)
    for r in rows:
        if r.get("checked") and r["kernel"] != "stream_empty":
            r["net_us"] = r["us"] - gap
            r["tbs"] = REGION / (r["net_us"] * 1e-6) / 1e12
    (out / "stream_probe.json").write_text(json.dumps({"device": describe(), "region_bytes": REGION, "rows": rows},
                                                      indent=1))
    print(f"# {describe()}; {REGION / 2**20:.0f} MiB a launch from {COPIES} copies; the empty kernel {gap:.2f} us")
    print(f"{'config':<38} {'blocks':>6} {'thr':>4} {'us':>7} {'net us':>7} {'TB/s':>6}  stands for")
    for r in rows:
        if not r.get("checked"):
            continue
        net = f"{r['net_us']:7.2f} {r['tbs']:6.2f}" if "net_us" in r else f"{'':7} {'':6}"
        print(f"{r['name']:<38} {r['blocks']:>6} {r['threads']:>4} {r['us']:7.2f} {net}  {r['note']}")
    for ln in lines:
        print(ln)
    return 0 if all(r.get("checked") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/r/stream_probe")))
