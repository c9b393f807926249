"""bw24.runtime.launch without a GPU: the ctypes layouts match cuda.h and arguments pack as CuPy's launch
packs them (the launch itself runs in the GPU tests: CudaOps with BW24_PDL=1 replays graphs through it)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from bw24.runtime.launch import _Attr, _Config, pack_arg


def test_struct_layouts_match_cuda_h():
    # CUlaunchAttribute: id (4) + pad (4) + a 64-byte union; CUlaunchConfig: 7 uints, stream, attrs, count
    assert ctypes.sizeof(_Attr) == 72 and _Attr.value.offset == 8
    assert _Config.hStream.offset == 32 and _Config.attrs.offset == 40 and _Config.numAttrs.offset == 48
    assert ctypes.sizeof(_Config) == 56


class _FakeArray:  # the part of cupy.ndarray the packer reads
    class data:
        ptr = 0xDEAD0000


@pytest.mark.parametrize("value, ctype, expect", [
    (np.int32(-7), ctypes.c_int32, -7), (np.float32(1.5), ctypes.c_float, 1.5),
    (np.uintp(0), ctypes.c_uint64, 0), (np.int64(2**40), ctypes.c_int64, 2**40),
    (5, ctypes.c_int64, 5), (0.25, ctypes.c_double, 0.25),
])
def test_scalars_pack_with_their_width(value, ctype, expect):
    v = pack_arg(value)
    assert type(v) is ctype and v.value == expect


def test_arrays_and_none_pack_as_pointers():
    assert pack_arg(_FakeArray()).value == 0xDEAD0000
    assert pack_arg(None).value is None  # a null void*


def test_unsupported_argument_is_named():
    with pytest.raises(TypeError, match="complex128"):
        pack_arg(np.complex128(1))
    with pytest.raises(TypeError, match="str"):
        pack_arg("x")
