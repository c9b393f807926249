#!/bin/bash
# Build llama.cpp's llama-bench, llama-speculative and llama-lookup on the offline GPU host, in the
# background (setsid: it outlives the call that starts it while the machine stays warm).
# Source: the llama.cpp vendored in the llama-cpp-python 0.3.36 sdist (README "Issue 5: speed beside llama.cpp"), trimmed of
# models/docs/tests/other backends and packed here as .llama/llsrc.tar.xz (carry .llama).
#   bash packages/bw24-engine/benchmarks/gpu_llama_build.sh start   # returns at once
#   bash packages/bw24-engine/benchmarks/gpu_llama_build.sh wait    # blocks until built; prints the log tail
# Binaries: /tmp/ll/b/bin/{llama-bench,llama-speculative,llama-lookup}
set -uo pipefail
D=/tmp/ll
case "${1:-}" in
  start)
    mkdir -p $D && tar xJf .llama/llsrc.tar.xz -C $D
    setsid nohup bash -c "cd $D && cmake -S llama.cpp -B b -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=OFF > build.log 2>&1 && \
      ninja -C b -j ${LLAMA_JOBS:-14} llama-bench llama-speculative llama-lookup >> build.log 2>&1; echo \$? > done" \
      > /dev/null 2>&1 < /dev/null &
    echo "llama.cpp build started in $D" ;;
  wait)
    while [ ! -f $D/done ]; do sleep 5; done
    tail -3 $D/build.log; echo "llama.cpp build rc=$(cat $D/done)"; ls -la $D/b/bin 2>/dev/null ;;
  *) echo "usage: gpu_llama_build.sh start | wait" >&2; exit 2 ;;
esac
