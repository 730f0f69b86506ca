#!/usr/bin/env bash
# Used by the Dockerfiles' build stages: works out what a slim runtime stage needs to run the
# given binaries, from what the dynamic linker resolves for them (ldd, transitive).
#
#   deploy/runtime-libs.sh OUT_DIR [--skip PREFIX]... BINARY...
#
# OUT_DIR/packages.txt  the Debian packages owning those libraries (install them with apt-get,
#                       which brings their own dependencies along);
# OUT_DIR/root/         every other library (CUDA's, from NVIDIA's repository; anything unowned),
#                       copied to the same absolute path under root/, so the RUNPATHs the build
#                       baked into the binaries still find them after `COPY root/ /`.
# Libraries under a --skip prefix are left out: the Dockerfile copies those trees whole (LibTorch's
# wheel, whose own libraries load further ones with dlopen, which ldd cannot see).
set -euo pipefail
out=$1
shift
skips=()
while [ "${1:-}" = --skip ]; do
  skips+=("$2")
  shift 2
done
[ $# -gt 0 ] || { echo "usage: $0 OUT_DIR [--skip PREFIX]... BINARY..." >&2; exit 2; }
mkdir -p "$out/root"
: > "$out/packages.txt.tmp"

owner() {  # the package owning a file, trying the merged-/usr spellings dpkg may know it by
  local f=$1 p
  for candidate in "$f" "$(readlink -f "$f")" "${f#/usr}" "/usr${f}"; do
    p=$(dpkg-query -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$p" ] && { echo "$p"; return 0; }
  done
  return 1
}

ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u | while read -r lib; do
  for s in "${skips[@]}"; do
    case "$lib" in "$s"*) continue 2 ;; esac
  done
  if pkg=$(owner "$lib") && [[ ! "$pkg" =~ ^(cuda-|libcublas|libcufft|libcurand|libcusparse|libcusolver|libnccl|libcudnn) ]]; then
    echo "$pkg" >> "$out/packages.txt.tmp"
  else
    # Not Debian's: copy the file itself (not a symlink) under the name the linker asked for.
    mkdir -p "$out/root$(dirname "$lib")"
    cp -L "$lib" "$out/root$lib"
    echo "runtime-libs: copying $lib" >&2
  fi
done
sort -u "$out/packages.txt.tmp" > "$out/packages.txt"
rm -f "$out/packages.txt.tmp"
echo "runtime-libs: $(wc -l < "$out/packages.txt") Debian packages, $(find "$out/root" -type f | wc -l) copied libraries" >&2
