#!/usr/bin/env bash
# Dependencies point one way: client -> server | worker -> service -> cuir (the pipeline and the
# IR). Two checks, run by ctest (label layering):
#   check_layering.sh includes SOURCE_ROOT
#       no source under a layer includes a header of a layer above it or beside it
#   check_layering.sh binaries COORDINATOR WORKER
#       the coordinator links neither NVRTC, the CUDA driver nor libcurl (the workers' GPU and
#       LLM code), the worker not hiredis (the coordinator's store). Direct dependencies only
#       (the executables' NEEDED entries): Debian's LibTorch itself pulls libcurl in through GDAL
#       and hiredis through Gloo, which says nothing about our layers.
set -euo pipefail

fail=0
case "${1:-}" in
  includes)
    root=$2
    # layer: the top-level folders it must not include from
    check() {
      local layer=$1; shift
      for banned in "$@"; do
        local hits
        hits=$(cd "$root" && grep -rnE "^#include \"$banned/" "$layer" --include='*.h' --include='*.cc' \
                 --include='*.cuh' --include='*.cu' || true)
        if [ -n "$hits" ]; then
          echo "$layer/ must not include $banned/ (dependencies point client -> server | worker -> service -> cuir):"
          echo "$hits" | sed 's/^/  /'
          fail=1
        fi
      done
    }
    check cuir service server worker client
    check service server worker client
    check server worker client
    check worker server client
    ;;
  binaries)
    coordinator=$2 worker=$3
    banned() {
      local bin=$1; shift
      local libs
      libs=$(readelf -d "$bin" | grep NEEDED)
      for lib in "$@"; do
        if grep -q "$lib" <<<"$libs"; then
          echo "$(basename "$bin") links $lib:"
          grep "$lib" <<<"$libs" | sed 's/^/  /'
          fail=1
        fi
      done
    }
    banned "$coordinator" libnvrtc libcuda.so libcurl
    banned "$worker" libhiredis
    ;;
  *)
    echo "usage: check_layering.sh includes SOURCE_ROOT | binaries COORDINATOR WORKER" >&2
    exit 2
    ;;
esac
[ "$fail" -eq 0 ] && echo "layering: ok"
exit "$fail"
