"""Kernel compile cache: a .cu file (+ its #include "..." headers) -> cubin through NVRTC.

We drive NVRTC directly (cupy_backends' thin binding) instead of RawModule(code=...): the CUDA
runtime is never touched, so compiling for sm_90a / sm_120a works on a machine with no GPU and no
driver (CI), and the cache key is ours: sha256 of the source, every included .cuh, the options,
the defines, the name expressions, the arch and the NVRTC version. Loading a cubin needs a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .errors import KernelCompileError, KernelSourceError

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
BASE_OPTIONS = ("-std=c++17", "--device-as-default-execution-space")


def cache_dir() -> Path:
    d = os.environ.get("BW24_KERNEL_CACHE")
    return Path(d) if d else Path.home() / ".cache" / "bw24" / "kernels"


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
    except Exception as e:
        raise KernelCompileError(f"NVRTC is not available through CuPy ({type(e).__name__}: {e}); "
                                 "install cupy-cuda13x[ctk]") from None
    return nvrtc


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    return tuple(_nvrtc().getVersion())


@functools.lru_cache(maxsize=1)
def cuda_include_dir() -> str:
    """Folder holding cuda_fp16.h (CuPy's CUDA path, else the pip CUDA wheels' include dir)."""
    cands: list[Path] = []
    try:
        import cupy

        p = cupy.cuda.get_cuda_path()
        if p:
            cands.append(Path(p) / "include")
    except Exception:
        pass
    try:
        import nvidia

        for base in nvidia.__path__:
            cands += sorted(Path(base).glob("cu*/include")) + [Path(base) / "cuda_runtime" / "include"]
    except Exception:
        pass
    for c in cands:
        if (c / "cuda_fp16.h").is_file():
            return str(c)
    raise KernelCompileError(f"cuda_fp16.h not found (looked in {[str(c) for c in cands]}); "
                             "install cupy-cuda13x[ctk]")


def source_closure(path: Path) -> list[Path]:
    """The .cu file and every "..." include it pulls in (recursively, relative to the includer)."""
    out: list[Path] = []
    todo = [Path(path)]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        if not p.is_file():
            raise KernelSourceError(f"kernel source not found: {p}")
        out.append(p)
        for inc in _INCLUDE_RE.findall(p.read_text(encoding="utf-8")):
            todo.append((p.parent / inc).resolve())
    return out


@dataclass(frozen=True)
class CompiledKernel:
    key: str
    arch: str
    cubin: bytes
    lowered: dict[str, str] = field(hash=False)  # name expression -> mangled symbol
    log: str = ""


def _options(arch: str, defines: dict[str, object] | None, options: tuple[str, ...], inc_dirs) -> list[str]:
    opts = [f"--gpu-architecture=sm_{arch}", *BASE_OPTIONS, *options]
    for k, v in sorted((defines or {}).items()):
        opts.append(f"-D{k}" if v is None else f"-D{k}={v}")
    opts += [f"-I{d}" for d in inc_dirs]
    return opts


def cache_key(path: Path, arch: str, defines=None, name_expressions=(), options=()) -> str:
    h = hashlib.sha256()
    for p in source_closure(path):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(json.dumps([arch, sorted((k, str(v)) for k, v in (defines or {}).items()),
                         list(name_expressions), list(options), list(BASE_OPTIONS),
                         list(nvrtc_version())]).encode())
    return h.hexdigest()


_lock = threading.Lock()
_mem: dict[str, CompiledKernel] = {}


def on_disk(key: str) -> bool:
    """Whether the disk cache holds the module of this cache key (its cubin and its lowered names)."""
    d = cache_dir()
    return (d / f"{key}.cubin").is_file() and (d / f"{key}.json").is_file()


def compile_cubin(path: str | os.PathLike, arch: str, defines: dict[str, object] | None = None,
                  name_expressions: tuple[str, ...] = (), options: tuple[str, ...] = (),
                  use_disk_cache: bool = True) -> CompiledKernel:
    """Compile one .cu for sm_<arch>; no GPU needed. Cached in memory and on disk by cache_key."""
    path = Path(path).resolve()
    name_expressions = tuple(name_expressions)
    key = cache_key(path, arch, defines, name_expressions, options)
    with _lock:
        if key in _mem:
            return _mem[key]
    d = cache_dir()
    cub_f, meta_f = d / f"{key}.cubin", d / f"{key}.json"
    if use_disk_cache and on_disk(key):
        ck = CompiledKernel(key, arch, cub_f.read_bytes(), json.loads(meta_f.read_text()))
    else:
        ck = _nvrtc_compile(path, arch, defines, name_expressions, options, key)
        if use_disk_cache:
            _atomic_write(d, cub_f, ck.cubin)
            _atomic_write(d, meta_f, json.dumps(ck.lowered).encode())
    with _lock:
        _mem[key] = ck
    return ck


def _atomic_write(d: Path, f: Path, data: bytes) -> None:
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(f.suffix + f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, f)
    except OSError:
        pass  # a read-only home only costs a recompile next time


def _nvrtc_compile(path: Path, arch, defines, name_expressions, options, key) -> CompiledKernel:
    nvrtc = _nvrtc()
    src = path.read_text(encoding="utf-8")
    opts = _options(arch, defines, tuple(options), [str(path.parent), cuda_include_dir()])
    prog = nvrtc.createProgram(src, path.name, [], [])
    try:
        for ne in name_expressions:
            nvrtc.addNameExpression(prog, ne)
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError as e:
            log = nvrtc.getProgramLog(prog)
            raise KernelCompileError(f"{path.name} failed for sm_{arch} ({e})\noptions: {' '.join(opts)}\n{log}") from None
        log = nvrtc.getProgramLog(prog)
        lowered = {ne: nvrtc.getLoweredName(prog, ne) for ne in name_expressions}
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    return CompiledKernel(key, arch, bytes(cubin), lowered, log)
