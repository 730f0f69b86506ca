#!/usr/bin/env bash
# The libFuzzer targets of fuzz/, built by clang in build-fuzz/ (or $CUBRIDGE_FUZZ_BUILD), apart
# from the g++ build in build/: our code instrumented with ASan, UBSan and libFuzzer's coverage,
# LibTorch and the other libraries as Debian ships them (uninstrumented: ASan sees their
# allocations, not their bugs).
#
#   scripts/fuzz.sh build               configure build-fuzz/ (clang, CUBRIDGE_FUZZ=ON) and build
#                                       the targets
#   scripts/fuzz.sh smoke [SECONDS]     build (its output in build-fuzz/build.log, shown if it
#                                       fails), then run each target SECONDS (default 30) on a copy
#                                       of its seed corpus; non-zero on any finding (a crash, a
#                                       sanitizer report, a leak, a timeout, running out of
#                                       memory), each finding's report first
#   scripts/fuzz.sh run TARGET SECONDS  one long run: new inputs go to build-fuzz/corpus/TARGET,
#                                       crashes to build-fuzz/crashes/TARGET; ends with the
#                                       executions and exec/s libFuzzer reports
#   scripts/fuzz.sh findings DIR        the findings among the artifacts in DIR, one path a line
#                                       (crash-, leak-, timeout-, oom-; not slow-unit- reports)
#
# TARGET: spec_guard, spec_frontend, cuir_roundtrip, submit_checks or torch_save (a `fuzz_` prefix
# is accepted). Exits 77, which ctest reports as skipped, when clang or libFuzzer is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${CUBRIDGE_FUZZ_BUILD:-$root/build-fuzz}
targets=(spec_guard spec_frontend cuir_roundtrip submit_checks torch_save)
# A unit over timeout_s is a hang (a finding); libFuzzer reports one over slow_s (no finding).
timeout_s=20 slow_s=10

usage() {
  sed -n '7,21p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# clang++ that links a libFuzzer target with the sanitizers (libclang-rt-14-dev on Debian 12).
have_toolchain() {
  command -v clang++ >/dev/null 2>&1 || return 1
  local probe rc=0
  probe=$(mktemp -d)
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
    > "$probe/probe.cc"
  clang++ -fsanitize=fuzzer,address,undefined "$probe/probe.cc" -o "$probe/probe" \
    >/dev/null 2>&1 || rc=1
  rm -rf "$probe"
  return $rc
}

# Probed once a run (the smoke checks before its quiet build, which checks again).
toolchain_ok=
need_toolchain() {
  [ -z "$toolchain_ok" ] || return 0
  if ! have_toolchain; then
    echo "fuzz: clang++ with libFuzzer not found (apt-get install clang libclang-rt-14-dev);" \
         "skipped" >&2
    exit 77
  fi
  toolchain_ok=1
}

build() {
  need_toolchain
  if [ ! -f "$out/build.ninja" ]; then
    # -O1 with line tables only, as fuzzing builds usually are: fast enough to run, quick to
    # build (full debug info for LibTorch's headers is most of a -g build's time).
    cmake -S "$root" -B "$out" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE= \
      -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" -DCUBRIDGE_FUZZ=ON -DCUBRIDGE_BUILD_TESTS=OFF \
      -DCUBRIDGE_INSTALL_SDK=OFF >/dev/null
  fi
  cmake --build "$out" --target "${targets[@]/#/fuzz_}"
}

target_name() {
  local t=${1#fuzz_}
  for known in "${targets[@]}"; do
    if [ "$t" = "$known" ]; then
      echo "$t"
      return
    fi
  done
  echo "fuzz: unknown target '$1' (targets: ${targets[*]})" >&2
  exit 2
}

# run_fuzzer TARGET SECONDS CORPUS ARTIFACT_DIR [MORE_INPUT_DIRS...]: libFuzzer writes new inputs
# to CORPUS only and reads the others.
run_fuzzer() {
  local t=$1 seconds=$2 corpus=$3 artifacts=$4
  shift 4
  # -timeout is the hang criterion (a timeout- artifact and a non-zero exit); libFuzzer also
  # writes a slow-unit- artifact for each new slowest unit over -report_slow_units seconds,
  # which is no finding (an unloaded machine may run it in a tenth of the time).
  local flags=(-max_total_time="$seconds" -timeout="$timeout_s" -report_slow_units="$slow_s"
               -print_final_stats=1 -artifact_prefix="$artifacts/")
  local asan=abort_on_error=1:symbolize=1
  case $t in
    spec_guard) flags+=(-max_len=8192 -dict="$root/fuzz/dicts/spec.dict") ;;
    # LibTorch keeps what it compiles in process-wide caches and registries it never frees; its
    # frees happen in code ASan does not see, so the leak checker would only report those.
    spec_frontend)
      flags+=(-max_len=8192 -dict="$root/fuzz/dicts/spec.dict" -detect_leaks=0
              -rss_limit_mb=4096)
      asan+=:detect_leaks=0 ;;
    cuir_roundtrip) flags+=(-max_len=16384 -dict="$root/fuzz/dicts/cuir.dict") ;;
    submit_checks) flags+=(-max_len=16384 -dict="$root/fuzz/dicts/spec.dict") ;;
    torch_save) flags+=(-max_len=16384 -dict="$root/fuzz/dicts/torch_save.dict") ;;
  esac
  ASAN_OPTIONS=$asan UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$out/fuzz/fuzz_$t" "${flags[@]}" "$corpus" "$@"
}

# The one-line summary from a libFuzzer log; SECONDS is how long it ran.
summary() {
  local t=$1 log=$2 seconds=$3 crashes=$4
  local runs rate
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  echo "fuzz_$t: ${runs:-?} executions, ${rate:-?} exec/s, ${seconds}s, $crashes finding(s)"
}

# The findings among a run's artifacts: libFuzzer names them crash-, leak-, timeout- or oom-
# (slow-unit- files are reports, not findings).
findings() {
  find "$1" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \)
}

smoke_dir=
smoke() {
  local seconds=${1:-30} failed=0 tmp
  need_toolchain
  mkdir -p "$out"
  # Quiet unless it fails, so that the targets' lines open the output (CI shows its head).
  if ! build >"$out/build.log" 2>&1; then
    tail -n 60 "$out/build.log"
    echo "fuzz: the build failed (whole log: $out/build.log)" >&2
    return 1
  fi
  tmp=$(mktemp -d)
  smoke_dir=$tmp
  trap 'rm -rf "$smoke_dir"' EXIT
  for t in "${targets[@]}"; do
    mkdir -p "$tmp/$t/corpus" "$tmp/$t/crashes"
    cp -r "$root/fuzz/corpus/$t/." "$tmp/$t/corpus/"
    local rc=0 start=$SECONDS found slow_units
    run_fuzzer "$t" "$seconds" "$tmp/$t/corpus" "$tmp/$t/crashes" "$root/fuzz/regressions/$t" \
      > "$tmp/$t/log" 2>&1 || rc=$?
    found=$(findings "$tmp/$t/crashes" | wc -l)
    summary "$t" "$tmp/$t/log" $((SECONDS - start)) "$found"
    slow_units=$(find "$tmp/$t/crashes" -type f -name 'slow-unit-*')
    if [ -n "$slow_units" ]; then
      mkdir -p "$out/slow/$t"
      xargs -r cp -t "$out/slow/$t/" <<<"$slow_units"
      echo "fuzz_$t: $(wc -l <<<"$slow_units") slow unit(s) of ${slow_s} s or more, under the" \
           "${timeout_s} s timeout: $(grep -m1 '^Slowest unit' "$tmp/$t/log" || true);" \
           "kept in $out/slow/$t"
    fi
    if [ $rc -ne 0 ] || [ "$found" -ne 0 ]; then
      failed=1
      # The report's own lines first (what, where), then the log's end.
      grep -E '^==[0-9]+==(ERROR|WARNING)|^SUMMARY:|runtime error:|^ALARM|out-of-memory|Test unit written' \
        "$tmp/$t/log" | head -n 20 || true
      tail -n 40 "$tmp/$t/log"
      mkdir -p "$out/crashes/$t"
      findings "$tmp/$t/crashes" | xargs -r cp -t "$out/crashes/$t/"
      echo "fuzz_$t failed (exit $rc); inputs kept in $out/crashes/$t" >&2
    fi
  done
  return $failed
}

run() {
  [ $# -eq 2 ] || usage
  local t seconds=$2 rc=0 start
  t=$(target_name "$1")
  build
  mkdir -p "$out/corpus/$t" "$out/crashes/$t"
  start=$SECONDS
  run_fuzzer "$t" "$seconds" "$out/corpus/$t" "$out/crashes/$t" "$root/fuzz/corpus/$t" \
    "$root/fuzz/regressions/$t" > "$out/fuzz_$t.log" 2>&1 || rc=$?
  tail -n 25 "$out/fuzz_$t.log"
  summary "$t" "$out/fuzz_$t.log" $((SECONDS - start)) "$(findings "$out/crashes/$t" | wc -l)"
  echo "log: $out/fuzz_$t.log"
  return $rc
}

case ${1:-} in
  build) build ;;
  smoke) shift; smoke "$@" ;;
  run) shift; run "$@" ;;
  findings) [ $# -eq 2 ] && [ -d "$2" ] || usage; findings "$2" | sort ;;
  *) usage ;;
esac
