#!/usr/bin/env bash
# On a lent GPU machine: the service end to end with a real GPU worker. Starts the local cluster
# (redis, coordinator, one worker that probes its GPU), submits a GPU-verified job through the CLI,
# watches it, fetches the kernel, submits again (a cache hit), and leaves the transcript in
# ${OUT:-/tmp}/service-e2e.txt. Build first: bash scripts/device-build.sh build-dev <service targets>.
set -uo pipefail
cd "$(dirname "$0")/.."
source .debs/activate.sh >/dev/null
build=${1:-build-dev}
out=${OUT:-/tmp}/service-e2e.txt
cli=$build/client/cubridge-cli
export CUBRIDGE_CLUSTER_DIR=/tmp/cubridge-e2e
rm -rf "$CUBRIDGE_CLUSTER_DIR"
run() { echo "\$ ${*/#$build\//}" | sed "s#$build/client/##"; "$@" 2>&1; echo "(exit $?)"; }
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
