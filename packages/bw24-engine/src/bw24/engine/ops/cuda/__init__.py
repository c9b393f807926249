"""cuda: the CuPy/NVRTC op backend (kernels in bw24/engine/kernels/*.cu).

Importing this package needs no GPU (CI imports it); constructing CudaOps does.
"""

from .backend import CudaOps
from .repack import SUPPORTED, Planes, UnsupportedWeightError, reconstruct, repack
from .weights import QWeight

__all__ = ["SUPPORTED", "CudaOps", "Planes", "QWeight", "UnsupportedWeightError", "reconstruct", "repack"]
