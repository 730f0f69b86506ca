#!/usr/bin/env bash
# On a lent GPU machine (docs/gpu.md, "Backward"): every check of the backward in one call, each
# step's log under $OUT, a table of the steps last. Steps, cheapest first, each timed; a step that
# fails is reported and the rest still run:
#   expert   tests/gpu/backward/backward_expert_check.py for fa3_sm90 (Hopper) and fa2_sm80 ($EXPERTS,
#            default "fa3 fa2"), every backward tile (head dims 64 and 128 on the base tile, 128
#            and 256 on the second), --bench
#   build    gpu_tests, the CLI, the runner and the PyTorch op (scripts/device-build.sh); the
#            other steps build only what they use (lowered, suite: gpu_tests; train, bench:
#            the op and the CLI), so `bench` alone does not wait for gpu_tests
#   lowered  Variants/BackwardOnGpu: the 16 variants of every kind's lowered backward, both
#            experts, head dims 64/128/256, both tiles at 128; sharded 4 ways
#   adapt    Examples/EveryExample: adapt's GPU stage, the backward's tiles tuned in the runner
#   train    tests/python/gpu_train_check.py (gradients incl. d256, compile, deterministic, loss)
#   bench    bench/torch_backward.py (the op's backward against Flex and SDPA, one process;
#            $BENCH_ARGS its options, e.g. "--seqlen 8192,1024 --deterministic")
#   bash scripts/device-backward.sh [STEPS...]     (default: these six, in this order)
# and, named only, for the sm_90a kernel's levers:
#   ab       the fa3_sm90 base tile again, built with the macros of each variant of $AB_DEFINES
#            (variants separated by ';', each NAME=VALUE ...; default CUBRIDGE_BWD_PRODUCER=0; set
#            and empty: none, so that `ncu` and `sass` take the kernel as is alone),
#            --bench: the levers' A/B in one call (ab1, ab2, ... in the order given)
#   compare  the fa3_sm90 base tile as is against each variant of $AB_DEFINES in one process, their
#            calls interleaved ($COMPARE_REPS pairs, default 30), fast and deterministic mode:
#            paired ratios for levers smaller than the 4% between processes; each variant
#            checked as `expert` checks; at $COMPARE_SEQLEN (default 8192; e.g. 8192,1024)
#            and $COMPARE_HEAD_DIMS (default the tile's largest, 128; e.g. 64,128);
#            COMPARE_TRACE=1: each also built with CUBRIDGE_BWD_TRACE, its CTAs' phases
#            (backward_expert_check.py --trace)
#   ncu_op   ncu of the op's lowered backward (preprocess, attention, postprocess) for each variant
#            of $NCU_VARIANTS (torch_backward.py's names, default "causal"; set empty: none)
#            and each spec of $NCU_SPECS (example or generality names, e.g.
#            "unstructured_keep_mask"; carry .lowered/G), bf16 d 128 at S = 8k, Flex not run;
#            the sections as `ncu`'s (issue 30 asks for causal's); each within $NCU_TIMEOUT s
#            (default 400)
#   ncu      ncu of the fa3_sm90 base tile's preprocess, attention and postprocess kernels at the
#            bench shape (speed of light, tensor pipes, warp stalls, per-instruction stall
#            samples), as is and with each variant; the clocks left as they are
#            (--clock-control none, METHOD.md)
#   sass     that kernel's SASS (cuobjdump --dump-sass) and ptxas' resource usage, as is and
#            with each variant, to read on the machine without a disassembler
#   suite    Suite/BackwardOnGpu: every example and generality spec as `lowered` does them, in
#            $SUITE_SHARDS shards (default 16), of which those in $SUITE_RUN (default all, e.g.
#            "0 1 2 3 4 5") run, $SHARD_JOBS at a time, each within $SUITE_TIMEOUT s (default
#            500): a call runs what fits in it, the next call the rest; $SUITE_FILTER another
#            gtest filter instead (e.g. '*OnGpu*longformer_head_dilation*:*OnGpu*dilated_window*':
#            those specs' forward and backward checks)
#   op_ab    the op's backward (bench/torch_backward.py, $OP_AB_ARGS its options) as is and with
#            each variant of $AB_DEFINES, one process each, from a copy of the experts whose
#            `#define` lines carry the variant's values (a word @NAME: the dormant region NAME
#            declared, e.g. "@tile_stream @stream_coords"): a lever timed through the lowering
#            (e.g. CUBRIDGE_BWD_SUM_DQ at head dim 64, which `compare` does not reach)
#   sanitize the fa3_sm90 base tile's ragged cases under compute-sanitizer's memcheck and
#            synccheck (a new barrier or mbarrier protocol's first check; $SANITIZE_ARGS more
#            options, e.g. "--define CUBRIDGE_BWD_PERSISTENT=1")
# Sharded steps run $SHARD_JOBS shards at a time (default 4), each shard's LibTorch on 16 /
# $SHARD_JOBS threads; most of a shard's time is NVRTC's single-threaded compile of each case's
# kernel, so SHARD_JOBS=16 finishes the suite fastest. $DEADLINE (seconds from the script's start)
# caps every shard's timeout and starts no batch past it, so that a call's steps end, and its
# logs come back, inside the device call's limit.
# The logs end up in $OUT/logs.tgz (a call brings back only a few files), the JSON results beside.
# The patches in tests/gpu/backward/pending/ are applied first (the device's copy of the tree is
# thrown away after the call), so that the checks cover what they would land; NO_PENDING=1 skips
# them.
set -uo pipefail
cd "$(dirname "$0")/.."
source .debs/activate.sh >/dev/null
out=${OUT:-/tmp}
if [ "${NO_PENDING:-0}" != 1 ]; then
  for patch in tests/gpu/backward/pending/*.patch; do
    [ -e "$patch" ] || continue
    if { command -v git >/dev/null && git apply "$patch"; } 2>"$out/pending.log" ||
       { ! command -v git >/dev/null && patch -s -p1 <"$patch"; } 2>>"$out/pending.log"; then
      echo "applied $patch"
    else echo "pending $patch does not apply:"; cat "$out/pending.log"; exit 1; fi
  done
fi
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(expert build lowered adapt train bench)
# The CPU verifier's LibTorch threads thrash when shards together ask for more than the 16 cores
# (session 15: four shards at 16 threads each ran 20x slower).
shard_jobs=${SHARD_JOBS:-4}
export OMP_NUM_THREADS=$(( shard_jobs >= 16 ? 1 : 16 / shard_jobs )) PYTHONUNBUFFERED=1
deadline=${DEADLINE:-100000}
summary=()
run() {  # run NAME COMMAND...: the command's output in $out/NAME.log, its time and status kept
  local name=$1 t0=$SECONDS rc
  shift
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  summary+=("$(printf '%-8s rc=%-3s %4ss  %s' "$name" "$rc" $((SECONDS - t0)) "$(tail -1 "$out/$name.log" | cut -c1-90)")")
  return $rc
}
has() { [[ " ${steps[*]} " == *" $1 "* ]]; }
# sharded NAME FILTER SHARDS TIMEOUT INDEX...: gpu_tests' FILTER cut in SHARDS shards, the
# given ones $shard_jobs at a time, each within TIMEOUT s and the deadline; the shards that did
# not start or were cut are named in the summary, for the next call's $SUITE_RUN.
sharded() {
  local name=$1 filter=$2 shards=$3 limit=$4 t0=$SECONDS k i left not_run=() cut=()
  shift 4
  local runs=("$@")
  for ((k = 0; k < ${#runs[@]}; k += shard_jobs)); do
    left=$((deadline - SECONDS - 20))
    if [ "$left" -lt 60 ]; then not_run+=("${runs[@]:k}"); break; fi
    [ "$left" -lt "$limit" ] || left=$limit
    for i in "${runs[@]:k:shard_jobs}"; do
      (GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "$left" ./build-dev/tests/gpu_tests \
         --gtest_filter="$filter" >"$out/${name}_$i.log" 2>&1
       echo "rc=$?" >>"$out/${name}_$i.log") &
    done
    wait
  done
  for i in "${runs[@]}"; do
    grep -q "^rc=124" "$out/${name}_$i.log" 2>/dev/null && cut+=("$i")
  done
  cat "$out/${name}"_*.log >"$out/$name.log" 2>/dev/null
  summary+=("$(printf '%-8s %s %4ss' "$name" "shards ${runs[*]} of $shards: $(grep -c '^\[       OK' "$out/$name.log") ok, $(grep -c '^\[  FAILED  \]' "$out/$name.log") failed lines; cut: ${cut[*]:-none}; not run: ${not_run[*]:-none}" $((SECONDS - t0)))")
}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
built=1
# Only the targets the steps use: a build of all five from an empty folder took ~8 minutes of a
# 10-minute call on an H100 (session 22), the op and the CLI alone are about half of it.
targets=()
if has build; then targets=(gpu_tests cubridge-cli cubridge-cli-local cubridge-gpu-runner cubridge_torch); fi
if has lowered || has suite || has adapt; then targets+=(gpu_tests); fi
if has adapt; then targets+=(cubridge-gpu-runner cubridge-cli-local); fi
if has train || has bench || has ncu_op || has op_ab; then targets+=(cubridge_torch cubridge-cli cubridge-cli-local); fi
if [ ${#targets[@]} -gt 0 ]; then
  # Built in the background while the expert checks use the GPU.
  mapfile -t targets < <(printf '%s\n' "${targets[@]}" | sort -u)
  (timeout "${BUILD_TIMEOUT:-900}" bash scripts/device-build.sh build-dev "${targets[@]}" \
     >"$out/build.log" 2>&1; echo "rc=$?" >>"$out/build.log") &
  build_pid=$!
fi
if has expert; then
  [[ " ${EXPERTS:-fa3 fa2} " == *" fa3 "* ]] &&
    run expert_fa3 bash -c "cd tests/gpu/backward && python3 backward_expert_check.py --expert fa3_sm90 --bench --out $out/expert_fa3.json"
  [[ " ${EXPERTS:-fa3 fa2} " == *" fa2 "* ]] &&
    run expert_fa2 bash -c "cd tests/gpu/backward && python3 backward_expert_check.py --expert fa2_sm80 --out $out/expert_fa2.json"
fi
# The kernel's variants as NAME:FLAGS (--define flags): base (none), then abN for each of
# AB_DEFINES split at ';'.
IFS=';' read -r -a ab_defines <<<"${AB_DEFINES-CUBRIDGE_BWD_PRODUCER=0}"
variants=("base:")
for defines in "${ab_defines[@]}"; do
  flags=""
  for d in $defines; do flags+=" --define $d"; done
  [ -n "$flags" ] && variants+=("ab${#variants[@]}:$flags")
done
# The lever steps' check: the fa3_sm90 base tile, or $LEVER_TILE (e.g. 64x64, head dim 256's
# tile: its `compare` times head dim 256), run from tests/gpu/backward.
base_check="python3 backward_expert_check.py --expert fa3_sm90 --tiles ${LEVER_TILE:-64x128}"
if has ab; then
  for v in "${variants[@]:1}"; do
    # Within $AB_TIMEOUT s (default 300): a new barrier protocol that hangs ends its step only.
    run "${v%%:*}" timeout "${AB_TIMEOUT:-300}" bash -c "cd tests/gpu/backward && $base_check --bench ${v#*:} --out $out/expert_fa3_${v%%:*}.json"
  done
fi
if has compare; then
  compare_flags=()
  for defines in "${ab_defines[@]}"; do
    [ -n "${defines// /}" ] && compare_flags+=(--compare "$defines")
  done
  if [ ${#compare_flags[@]} -gt 0 ]; then
    run compare timeout "${AB_TIMEOUT:-300}" bash -c "cd tests/gpu/backward && $base_check --reps ${COMPARE_REPS:-30} --seqlen ${COMPARE_SEQLEN:-8192} ${COMPARE_HEAD_DIMS:+--compare-head-dims $COMPARE_HEAD_DIMS} ${COMPARE_TRACE:+--trace} $(printf '%q ' "${compare_flags[@]}") --out $out/compare.json"
  else
    summary+=("compare  not run: \$AB_DEFINES names no variant")
  fi
fi
# ncu of the backward's first three kernels (preprocess, attention, postprocess; the regex
# leaves out the plan kernel, attn_bwd_plan, which came first in session 27's), the clocks as
# they are: the `ncu` and `ncu_op` steps' profiler, the program after it.
ncu_bwd="ncu --clock-control none -k regex:attn_bwd_[kp][eor] -c 3 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section SourceCounters --print-details all"
if has ncu; then
  for v in "${variants[@]}"; do
    run "ncu_${v%%:*}" bash -c "cd tests/gpu/backward && $ncu_bwd $base_check --profile ${v#*:}"
  done
fi
if has sanitize; then
  for tool in memcheck synccheck; do
    run sanitize_$tool bash -c "cd tests/gpu/backward && compute-sanitizer --tool $tool --error-exitcode 9 $base_check ${SANITIZE_ARGS:-}"
  done
fi
if has sass; then
  for v in "${variants[@]}"; do
    name=${v%%:*} flags=${v#*:}
    flags=${flags//--define /-D}
    run "sass_$name" bash -c "cd tests/gpu/backward && nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -cubin -Xptxas -v $flags -I ../../../cuir/experts/fa3_sm90 -DCUBRIDGE_BWD_KERNEL='\"../../../cuir/experts/fa3_sm90/kernel_bwd.cu\"' shim.cu -o $out/bwd_$name.cubin && cuobjdump --dump-sass $out/bwd_$name.cubin > $out/sass_$name.txt && rm $out/bwd_$name.cubin && echo sass: \$(wc -l < $out/sass_$name.txt) lines"
  done
fi
if [ -n "${build_pid:-}" ]; then
  wait "$build_pid"
  grep -q "^rc=0" "$out/build.log" && built=0
  summary+=("$(printf '%-8s rc=%-3s        %s' build "$built" "$(tail -2 "$out/build.log" | head -1 | cut -c1-90)")")
fi
if [ "$built" = 0 ]; then
  has lowered && sharded lowered 'Variants/BackwardOnGpu.*' 4 420 0 1 2 3
  suite_shards=${SUITE_SHARDS:-16}
  # shellcheck disable=SC2046  # the shard indices, one word each
  has suite && sharded suite "${SUITE_FILTER:-Suite/BackwardOnGpu.*}" "$suite_shards" "${SUITE_TIMEOUT:-500}" \
    ${SUITE_RUN:-$(seq 0 $((suite_shards - 1)))}
  has adapt && run adapt timeout 500 ./build-dev/tests/gpu_tests --gtest_filter='Examples/EveryExample.*'
  export PYTHONPATH=$PWD/build-dev/python CUBRIDGE_ADAPT_ARGS="--gpu off"
  has train && run train bash -c "cd tests/python && timeout 300 python3 gpu_train_check.py --out $out/train.json"
  # shellcheck disable=SC2086  # $BENCH_ARGS: torch_backward.py's options, one word each
  has bench && run bench timeout "${BENCH_TIMEOUT:-300}" python3 bench/torch_backward.py ${BENCH_ARGS:-} --out "$out/torch_backward.json"
  if has op_ab; then
    # The op as is and with each variant of $AB_DEFINES, a process each: the expert copied with
    # its `#define NAME VALUE` lines rewritten, the adapt and torch caches bypassed (neither key
    # holds the expert's text), so each process lowers from its own copy.
    for defines in "" "${ab_defines[@]}"; do
      [ -z "$defines" ] || [ -n "${defines// /}" ] || continue
      name=base
      [ -z "$defines" ] || name=$(echo "$defines" | tr -c 'A-Za-z0-9\n' _ | sed 's/CUBRIDGE_BWD_//g; s/^_*//; s/_*$//')
      copy=$(mktemp -d)
      cp -r cuir/experts "$copy/experts"
      for d in $defines; do
        if [[ $d == @* ]]; then  # @NAME: the dormant region NAME declared
          sed -i "s|// dormant @cuir-region ${d#@}\$|// @cuir-region ${d#@}|; s|// dormant @cuir-end ${d#@}\$|// @cuir-end ${d#@}|" \
            "$copy/experts/fa3_sm90/kernel_bwd.cu"
        else
          sed -i "s/^#define ${d%%=*} .*/#define ${d%%=*} ${d#*=}/" "$copy/experts/fa3_sm90/kernel_bwd.cu"
        fi
      done
      # shellcheck disable=SC2086  # $OP_AB_ARGS: torch_backward.py's options, one word each
      run "op_$name" env CUBRIDGE_EXPERTS_DIR="$copy/experts" CUBRIDGE_TORCH_CACHE="$copy/cache" \
        CUBRIDGE_ADAPT_ARGS="--gpu off --no-cache" timeout "${BENCH_TIMEOUT:-300}" \
        python3 bench/torch_backward.py ${OP_AB_ARGS:-} --out "$out/op_$name.json"
    done
  fi
  if has ncu_op; then
    # The first three matching launches: the warm-up call's preprocess, attention and
    # postprocess (the same kernels the timed calls run).
    for v in ${NCU_VARIANTS-causal}; do
      # shellcheck disable=SC2086  # $ncu_bwd: the profiler's command line, one word each
      run "ncu_op_$v" timeout "${NCU_TIMEOUT:-400}" $ncu_bwd python3 bench/torch_backward.py --variants "$v" \
        --seqlen 8192 --reps 1 --no-flex .
    done
    # And each example or generality spec named in $NCU_SPECS (carry the suite's kernels,
    # .lowered/G: bench/make_kernels.sh).
    for v in ${NCU_SPECS:-}; do
      # shellcheck disable=SC2086
      run "ncu_op_$v" timeout "${NCU_TIMEOUT:-400}" $ncu_bwd python3 bench/torch_backward.py \
        --specs "^(example|generality) $v\$" --suite-kernels .lowered/G --seqlen 8192 --reps 1 \
        --no-flex .
    done
  fi
fi
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
(cd "$out" && ls *.log *.txt >/dev/null 2>&1 && tar czf logs.tgz *.log *.txt && rm -f *.log sass_*.txt gpu.txt)
