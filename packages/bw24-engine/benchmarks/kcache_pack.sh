#!/bin/bash
# Build the GPU host's kernel disk cache here, on a machine without a GPU, and pack it for the setup call to unpack
# (carry .kcache). Why: a bare host compiles the ~1,000 modules of warm_kernels.py on its 16 cores in 2.3 minutes of
# the session's 30 (29169ce), and the GPU pytest's canaries compile theirs again where the manifest lacks them (at
# 9205b3a the GPU pytest without `warm` was still running after 8 minutes). NVRTC needs no GPU, and the cache key
# (bw24.runtime.compile.cache_key) is the sources, the defines, the names, the arch and NVRTC's major.minor version:
# built with the host's NVRTC, the host finds every module and `warm` only checks them (its line counts the modules
# found). Built with another version the pack is never hit, and `warm` compiles as before: nothing is wrong, only slow.
#   bash packages/bw24-engine/benchmarks/kcache_pack.sh PYTHON [ARCH]
# PYTHON: an interpreter whose CuPy loads NVRTC 13.0 (the host's: cupy-cuda13x 14.2 with nvidia-cuda-nvrtc 13.0.88,
# e.g. `python3 -m venv /tmp/nv130 && /tmp/nv130/bin/pip install cupy-cuda13x==14.2.0 'nvidia-cuda-nvrtc==13.0.*'
# 'nvidia-cuda-runtime==13.0.*' numpy .whl/gguf-*.whl`); ARCH: 90a (the H100's and the H200's). Writes
# .kcache/kernels.tar.xz (git-ignored) from a fresh cache folder, so it holds the current sources' modules only.
set -euo pipefail
PY=${1:?usage: kcache_pack.sh PYTHON [ARCH]}; ARCH=${2:-90a}
C=$(mktemp -d /tmp/kcache.XXXX)
BW24_KERNEL_CACHE=$C PYTHONPATH=$(ls -d packages/*/src | paste -sd:) "$PY" packages/bw24-engine/benchmarks/warm_kernels.py "$ARCH"
mkdir -p .kcache && tar cJf .kcache/kernels.tar.xz -C "$C" . && rm -rf "$C"
ls -la .kcache/kernels.tar.xz
