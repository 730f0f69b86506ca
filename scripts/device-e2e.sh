#!/usr/bin/env bash
# On a lent GPU machine: the service end to end with a real GPU worker. Starts the local cluster
# (redis, coordinator, one worker that probes its GPU), submits a GPU-verified job through the CLI,
# watches it, fetches the kernel, submits again (a cache hit), and leaves the transcript in
# ${OUT:-/tmp}/service-e2e.txt. Build first: bash scripts/device-build.sh build-dev <service targets>.
#   bash scripts/device-e2e.sh [BUILD_DIR] [scaling]
# `scaling` (a machine of two or more GPUs, issue 31) measures instead what a second worker buys:
# for 1 and then 2 workers (worker i on GPU i), one new variant (cache cleared, lift cached) and
# ten distinct variants submitted at once, with wall times, the candidates each worker ran and
# both GPUs' utilisation sampled during the jobs (${OUT:-/tmp}/service-scaling.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
source .debs/activate.sh >/dev/null
build=${1:-build-dev}
out=${OUT:-/tmp}/service-e2e.txt
cli=$build/client/cubridge-cli
export CUBRIDGE_CLUSTER_DIR=/tmp/cubridge-e2e
rm -rf "$CUBRIDGE_CLUSTER_DIR"
run() { echo "\$ ${*/#$build\//}" | sed "s#$build/client/##"; "$@" 2>&1; echo "(exit $?)"; }

# One scaling round: N workers, the lift warmed by one job, then one new variant alone and ten
# at once; each phase's wall time, the candidates per worker (their logs' task lines) and the
# GPUs' utilisation every 0.5 s while it ran.
scaling_round() {
  local n=$1 t0 pids=() i
  rm -rf "$CUBRIDGE_CLUSTER_DIR"
  scripts/local-cluster start --build "$build" --workers "$n" --arch auto || return 1
  source "$CUBRIDGE_CLUSTER_DIR/env"
  "$cli" workers
  local cfg=(--arch sm_90 --verification gpu --batch 2 --heads-q 32 --heads-kv 8 --head-dim 128
             --seqlen 4096 --backward off)
  "$cli" submit examples/specs/causal.py "${cfg[@]}" --watch >/dev/null  # the lift, cached
  for phase in one ten; do
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader -lms 500 \
      >"/tmp/cubridge-util-$n-$phase.csv" 2>&1 &
    local smi=$! count=1
    [ "$phase" = ten ] && count=10
    t0=$(date +%s.%N)
    pids=()
    for i in $(seq "$count"); do
      "$cli" submit examples/specs/sliding_window.py "${cfg[@]}" --param "window=$((37 * i + 100 * n))" \
        --watch >"/tmp/cubridge-job-$n-$phase-$i.txt" 2>&1 &
      pids+=($!)
    done
    local failed=0
    for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
    kill "$smi" 2>/dev/null
    printf '%d worker(s), %s variant(s): %.1f s wall, %d failed\n' "$n" "$count" \
      "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')" "$failed"
    awk -F', ' '{u[$1]+=$2; c[$1]++} END {for (g in u) printf "  GPU %s: mean utilisation %.0f%% over %d samples\n", g, u[g]/c[g], c[g]}' \
      "/tmp/cubridge-util-$n-$phase.csv"
  done
  for i in $(seq "$n"); do
    printf '  worker %d ran %d candidate tasks\n' "$i" \
      "$(grep -c 'task=cand-.*: running' "$CUBRIDGE_CLUSTER_DIR/logs/worker-$i.log")"
  done
  scripts/local-cluster stop >/dev/null
}

if [ "${2:-}" = scaling ]; then
  out=${OUT:-/tmp}/service-scaling.txt
  {
    echo "# $(date -u +%F) on $(nvidia-smi --query-gpu=name --format=csv,noheader | paste -sd,)"
    scaling_round 1
    scaling_round 2
  } >"$out" 2>&1
  cat "$out"
  exit 0
fi
{
  echo "# $(date -u +%F) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  run scripts/local-cluster start --build "$build" --workers 1 --arch auto
  source "$CUBRIDGE_CLUSTER_DIR/env"
  run "$cli" workers
  run "$cli" submit examples/specs/causal_document.py --arch sm_90 --verification gpu \
    --batch 2 --heads-q 32 --heads-kv 8 --head-dim 128 --seqlen 4096 \
    --buffer doc=lengths:1000,2000,1096 --idempotency-key e2e-doc-1 --watch | tee /tmp/cubridge-e2e-submit.txt
  job=$(grep -o '^j-[0-9a-f]*' /tmp/cubridge-e2e-submit.txt | head -1)
  run "$cli" get "$job" -o /tmp/cubridge-e2e-kernel
  python3 - <<'PY'
import json
r = json.load(open("/tmp/cubridge-e2e-kernel/report.json"))
g = r["gpu"]
print("report: verification_level", r["verification_level"], "| best", g["best"])
for c in g["candidates"]:
    p = c.get("profile", {})
    print("  %-9s passed=%-5s %s" % (c["name"], c.get("passed"), "%.1f TFLOP/s kept" % p["tflops_kept"] if p else c.get("error", "")[:120]))
PY
  run "$cli" submit examples/specs/causal_document.py --arch sm_90 --verification gpu \
    --batch 2 --heads-q 32 --heads-kv 8 --head-dim 128 --seqlen 4096 \
    --buffer doc=lengths:1000,2000,1096
  echo '$ metrics (cubridge_jobs_total, cubridge_kernel_cache_lookups_total, stage counts)'
  python3 -c 'import urllib.request;print(urllib.request.urlopen("http://127.0.0.1:9464/metrics").read().decode())' | grep -E '^cubridge_(jobs_total|kernel_cache|stage_duration_seconds_count)'
  run scripts/local-cluster stop
} > "$out" 2>&1
cp "$CUBRIDGE_CLUSTER_DIR"/logs/*.log "${OUT:-/tmp}/" 2>/dev/null
cat "$out"
