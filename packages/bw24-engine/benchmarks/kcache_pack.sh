#!/bin/bash
# Build the GPU host's kernel disk cache here, on a machine without a GPU, and pack it for the setup call to unpack
# (carry .kcache). Why: a bare host compiles the ~1,000 modules of warm_kernels.py on its 16 cores in 2.3 minutes of
# the session's 30 (29169ce), and the GPU pytest's canaries compile theirs again where the manifest lacks them (at
# 9205b3a the GPU pytest without `warm` was still running after 8 minutes). NVRTC needs no GPU, and the cache key
# (bw24.runtime.compile.cache_key) is the sources, the defines, the names, the arch and NVRTC's major.minor version:
# built with the host's NVRTC, the host finds every module and `warm` only checks them (its line counts the modules
# found). Built with another version the pack is never hit, and `warm` compiles as before: nothing is wrong, only slow.
#   bash packages/bw24-engine/benchmarks/kcache_pack.sh PYTHON [ARCH]
# PYTHON: an interpreter whose CuPy loads NVRTC 13.0 (the host's as its cupy-cuda13x 14.2 and torch cu130 suggest, not
# yet read there: `warm` prints it; here nvidia-cuda-nvrtc 13.0.88;
# README "The GPU host" has the venv's commands); ARCH: 90a (the H100's and the H200's). Writes .kcache/kernels.tar.xz
# (git-ignored). An existing pack is the start: only the modules whose sources changed compile (~20 minutes on 2 cores
# from nothing), and the modules `warm` no longer asks for are dropped, so the pack holds the current sources' only.
set -euo pipefail
PY=${1:?usage: kcache_pack.sh PYTHON [ARCH]}; ARCH=${2:-90a}
C=$(mktemp -d /tmp/kcache.XXXX)
[ -f .kcache/kernels.tar.xz ] && tar xJf .kcache/kernels.tar.xz -C "$C"
BW24_KERNEL_CACHE=$C BW24_WARM_KEYS=$C.keys PYTHONPATH=$(ls -d packages/*/src | paste -sd:) \
  "$PY" packages/bw24-engine/benchmarks/warm_kernels.py "$ARCH"
for f in "$C"/*; do grep -qxF "$(basename "${f%.*}")" "$C.keys" || rm -f "$f"; done
mkdir -p .kcache && tar cJf .kcache/kernels.tar.xz -C "$C" . && rm -rf "$C" "$C.keys"
echo "$(tar tJf .kcache/kernels.tar.xz | grep -c cubin) modules: $(ls -la .kcache/kernels.tar.xz)"
