"""kernel_cases.token_ring_case (kernel-check's case for kernels/readback.cu publish_token) on a host stand-in for
the CUDA backend: green when the publish writes the token into slot pos mod the ring's size, red when it writes the
wrong slot or nothing. The kernel itself runs in the GPU's kernel-check and in test_cuda_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine.kernel_cases import token_ring_case
from bw24.engine.ops.cuda.readback import TokenRing


class HostRingOps:
    """What the case uses of CudaOps, on the host: zeros, copy_from_host, token_ring (while token_ring_env is "1")
    and publish_token, whose slot is pos + shift (0: the kernel's rule), or nothing at all (write=False); stray: the
    token also into the slot after its own."""

    token_ring_env = "0"

    def __init__(self, shift: int = 0, write: bool = True, stray: bool = False):
        self.ring, self.shift, self.write, self.stray = TokenRing(np.empty(256, np.int32)), shift, write, stray

    @property
    def token_ring(self):
        return self.ring if self.token_ring_env == "1" else None

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype)

    def copy_from_host(self, dst, src):
        dst[...] = src

    def publish_token(self, token, pos):
        if self.write and self.token_ring is not None:
            for extra in (0, 1) if self.stray else (0,):
                self.ring.host[(int(pos[0]) + self.shift + extra) % self.ring.n] = int(token[0])


def test_the_case_is_green_on_the_kernels_rule_and_leaves_the_switch_as_it_was():
    cu = HostRingOps()
    r = token_ring_case(40)("token ring", None, cu, np.random.default_rng(0))
    assert r.ok and r.maxdiff == 0
    assert cu.token_ring_env == "0"


def test_canary_a_stray_write_is_red():
    """Each token read back right, but the ring holds one more copy of it than the rule puts there."""
    r = token_ring_case(40)("token ring", None, HostRingOps(stray=True), np.random.default_rng(0))
    assert not r.ok


@pytest.mark.parametrize("cu", [HostRingOps(shift=1), HostRingOps(write=False)], ids=["wrong slot", "no write"])
def test_canary_a_token_not_in_its_slot_raises(cu):
    with pytest.raises(RuntimeError, match="still unset"):  # (run_cases turns a raising case red)
        token_ring_case(40)("token ring", None, cu, np.random.default_rng(0))
