"""Fill the kernel disk cache on a fresh GPU host before the chain's first stage, on every core at once.

A bare host compiles each kernel instance the first time a process asks for it, one NVRTC run after
another (~0.5 s each here): kernel-check took 5.8 of the 30 device minutes at e7b99ea. This compiles the
instances the engine launches (kernels.COMPILE_SET), each as its own module with the defines CudaOps gives
on sm_90+ (BW24_PDL), exactly as ops/cuda/kernels.get_kernel will ask for it (the same cache key), in a
process pool. Then the modules the last session's kernel-check and GPU pytest loaded (the canaries' planted
variants, the opt-ins' builds: MANIFEST, recorded through kernels.MANIFEST_ENV and merged by
ingest_evidence.py), those with the PDL define this device gets; a recorded module that no longer compiles (a
kernel since removed) is counted and skipped. Other instances still compile on first use.

A module already in the disk cache is not compiled again: the cache that `kcache_pack.sh` builds on a machine
without a GPU (NVRTC 13.0, sm_90a) and the setup call unpacks makes this stage a check. Its line says how many
modules it found there and which NVRTC this host has: the cache key holds NVRTC's version, so a pack built with
another version is never hit and every module compiles here as before.

    python warm_kernels.py [ARCH]      (ARCH: the device's, e.g. 90a; default: read from the GPU)
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

MANIFEST = Path(__file__).resolve().parent / "kernel_manifest_h200.jsonl"


def jobs(pdl: bool = True) -> list[tuple[str, tuple[str, ...], dict]]:
    """(kernel file, name expressions, defines) per module get_kernel loads: one template instance each, and
    each file's plain extern "C" kernels (attn_combine, moe_route, x_to_half, ...) as one module."""
    from bw24.engine.ops.cuda.kernels import COMPILE_SET

    defines = {"BW24_PDL": 1} if pdl else {}
    out = []
    for f, names in COMPILE_SET.items():
        out += [(f, (n,), defines) for n in names] + [(f, (), defines)]
    return out


def _key(job) -> tuple:
    """A job's identity: (file, names, its defines sorted), as the compile cache keys it."""
    f, names, defines = job
    return f, tuple(names), tuple(sorted(defines.items()))


def manifest_jobs(path: Path = MANIFEST, pdl: bool = True) -> list[tuple[str, tuple[str, ...], dict]]:
    """The recorded modules (one JSON line each: file, names, defines) of kernel files that still exist, with
    the PDL define as this device gets it (a record from a device without it, or with it, skipped), once each."""
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR

    out, seen = [], set()
    for line in path.read_text().splitlines() if path.is_file() else []:
        rec = json.loads(line)
        job = (rec["file"], tuple(rec["names"]), {k: v for k, v in rec["defines"]})
        if _key(job) in seen or ("BW24_PDL" in job[2]) != pdl or not (KERNEL_DIR / job[0]).is_file():
            continue
        seen.add(_key(job))
        out.append(job)
    return out


def _compile(job, arch: str) -> tuple[str | None, bool]:
    """(the module's cache key, whether the disk cache held it already); the key None where it does not compile (a
    recorded instance since removed)."""
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime.compile import cache_key, compile_cubin, on_disk

    f, names, defines = job
    hit = on_disk(cache_key((KERNEL_DIR / f).resolve(), arch, defines, names))
    try:
        return compile_cubin(KERNEL_DIR / f, arch, defines, names).key, hit
    except Exception:  # noqa: BLE001 (a stale record: NVRTC's error for a name the file no longer has)
        return None, hit


def main(arch: str | None = None) -> int:
    if arch is None:
        from bw24.runtime import device_info

        d = device_info()
        arch, pdl = d.arch, d.cc >= (9, 0)
    else:
        pdl = int(arch[:2]) >= 9
    todo = jobs(pdl)
    have = {_key(j) for j in todo}
    recorded = [j for j in manifest_jobs(pdl=pdl) if _key(j) not in have]
    t = time.perf_counter()
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        done = list(pool.map(_compile, todo + recorded, [arch] * (len(todo) + len(recorded))))
    keys = [k for k, _ in done]
    failed = sum(k is None for k in keys)
    from bw24.runtime.compile import cache_dir, nvrtc_version

    print(f"warm: {len(keys) - failed} modules for sm_{arch}{' with BW24_PDL' if pdl else ''} ({len(todo)} of the "
          f"compile set, {len(recorded)} recorded, {failed} that no longer compile) in "
          f"{time.perf_counter() - t:.1f} s on {os.cpu_count()} cores; {sum(h for _, h in done)} found in the disk "
          f"cache ({cache_dir()}), NVRTC {'.'.join(map(str, nvrtc_version()))}")
    if os.environ.get("BW24_WARM_KEYS"):  # kcache_pack.sh keeps these modules of a reused cache and drops the rest
        Path(os.environ["BW24_WARM_KEYS"]).write_text("".join(f"{k}\n" for k in keys if k))
    return 1 if any(k is None for k in keys[:len(todo)]) else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
