"""bw24.probe: GPU microbenchmarks and the measured ceilings (roofline) everything else compares against.

`bw24-probe all` measures the current GPU and caches the result per device (see `ceilings`);
perf, benchmarks and the workbench notebooks read the roofline with `ceilings.load_current()`.
Importing this package never touches the GPU.
"""

from .ceilings import (
                       Ceilings,
                       CeilingsError,
                       CeilingsFormatError,
                       CeilingsNotFoundError,
                       device_key,
                       load,
                       load_current,
                       save,
)

__all__ = ["Ceilings", "CeilingsError", "CeilingsFormatError", "CeilingsNotFoundError", "device_key", "load",
           "load_current", "save"]
