"""Loading compiled kernels on the GPU: CompiledKernel -> cupy.RawModule -> RawKernel handles."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

from .compile import CompiledKernel, cache_dir, compile_cubin
from .device import device_info, require_gpu
from .errors import KernelCompileError

_lock = threading.Lock()
_modules: dict[str, KernelModule] = {}


class KernelModule:
    """A loaded cubin. get(name) takes a plain extern "C" name or a template name expression."""

    def __init__(self, ck: CompiledKernel):
        import cupy

        self.compiled = ck
        d = cache_dir()
        try:
            d.mkdir(parents=True, exist_ok=True)
            f = d / f"{ck.key}.cubin"
            if not f.is_file():
                f.write_bytes(ck.cubin)
        except OSError:  # read-only cache dir: load from a temp file instead
            fd, name = tempfile.mkstemp(suffix=".cubin")
            os.write(fd, ck.cubin)
            os.close(fd)
            f = Path(name)
        self._raw = cupy.RawModule(path=str(f))
        self._fns: dict[str, object] = {}

    def get(self, name: str):
        fn = self._fns.get(name)
        if fn is None:
            sym = self.compiled.lowered.get(name, name)
            try:
                fn = self._raw.get_function(sym)
            except Exception as e:
                raise KernelCompileError(f"kernel {name!r} ({sym}) not in module: {e}") from None
            self._fns[name] = fn
        return fn


def load_module(path: str | os.PathLike, defines: dict[str, object] | None = None,
                name_expressions: tuple[str, ...] = (), options: tuple[str, ...] = (),
                arch: str | None = None) -> KernelModule:
    """Compile (cached) for the current device's arch and load. Needs a GPU."""
    require_gpu()
    arch = arch or device_info().arch
    ck = compile_cubin(path, arch, defines, tuple(name_expressions), tuple(options))
    with _lock:
        m = _modules.get(ck.key)
        if m is None:
            m = _modules[ck.key] = KernelModule(ck)
    return m
