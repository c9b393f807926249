"""bw24.runtime: device discovery, kernel compile cache, streams, device arena, CUDA graphs.

Importing this package never touches the GPU; use has_gpu() / no_gpu_reason() to ask.
"""

from .arena import DeviceArena
from .compile import CompiledKernel, cache_key, compile_cubin, nvrtc_version, source_closure
from .device import DeviceInfo, arch_for_cc, describe, device_info, has_gpu, no_gpu_reason, require_gpu
from .errors import (
                     ArenaError,
                     GraphError,
                     KernelCompileError,
                     KernelSourceError,
                     NoGPUError,
                     RuntimeErrorBase,
)
from .graph import CapturedGraph
from .module import KernelModule, load_module
from .stream import EventTimer, new_stream, pinned_empty
from .tuning import Tuning, TuningTableError, device_key, load_tuning, read_table

COMPILE_ONLY_ARCHS = ("90a", "120a")  # what CI compiles for without a GPU (Hopper, consumer Blackwell)

__all__ = [
    "ArenaError", "COMPILE_ONLY_ARCHS", "CapturedGraph", "CompiledKernel", "DeviceArena", "DeviceInfo",
    "EventTimer", "GraphError", "KernelCompileError", "KernelModule", "KernelSourceError", "NoGPUError",
    "RuntimeErrorBase", "arch_for_cc", "cache_key", "compile_cubin", "describe", "device_info", "has_gpu",
    "load_module", "new_stream", "no_gpu_reason", "nvrtc_version", "pinned_empty", "require_gpu",
    "source_closure", "Tuning", "TuningTableError", "device_key", "load_tuning", "read_table",
]
