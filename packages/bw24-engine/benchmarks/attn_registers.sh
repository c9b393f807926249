#!/bin/bash
# Registers and spills of the decode attention's instances per build (ptxas -v, sm_90a, no GPU needed): why
# BW24_ATTN_MIN_BLOCKS exists (an SM holds 65536 / (128 x registers) blocks of attn_split's 128 threads) and what
# BW24_ATTN_FILL costs in registers (blocks/SM: of 128 threads, by registers, at most 16).
#   bash packages/bw24-engine/benchmarks/attn_registers.sh > packages/bw24-engine/evidence/attn_registers_<sha>.txt
set -euo pipefail
K=$(cd "$(dirname "$0")/../src/bw24/engine/kernels" && pwd)
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
sig="(const float*, const __half*, const __half*, const int*, int, int, int, float, float, int, int, float*, float*,
 float*, int*, i8*, int2*)"
{ echo "#include \"attention.cu\""
  for g in 1 2 4 8; do echo "template __global__ void attn_split<128,128,$g,32,__half>$sig;"; done; } > "$T/inst.cu"
echo "# $(nvcc --version | tail -1); date: $(date -u '+%F %T UTC'); git: $(git -C "$K" rev-parse HEAD)"
for d in "" "-DATTN_MIN_BLOCKS=4" "-DBW24_ATTN_FILL=2" "-DBW24_ATTN_FILL=4" "-DATTN_MIN_BLOCKS=4 -DBW24_ATTN_FILL=2"; do
  echo "== -DBW24_PDL=1 ${d:-(the defaults)}"
  nvcc -arch=sm_90a -cubin -o "$T/a.cubin" -I"$K" --expt-relaxed-constexpr -std=c++17 -Xptxas -v -DBW24_PDL=1 $d \
    "$T/inst.cu" 2>&1 | grep -E "Compiling entry|Used|spill" | paste - - - \
    | sed -E "s/.*entry function '([^']*)'.*spill stores, ([0-9]+) bytes spill loads.*Used ([0-9]+) registers.*/\1 regs \3 spill_loads \2/" \
    | sed -E 's/_Z10attn_splitILi128ELi128ELi([0-9])ELi32E6__halfE.*( regs)/attn_split<128,128,\1,32,__half>\2/' \
    | awk '{ b = int(65536 / (128 * $3)); printf "%-40s %s %s  %s %s  blocks/SM %d\n", $1, $2, $3, $4, $5, (b > 16 ? 16 : b) }'
done
