#!/usr/bin/env bash
# Here (CPU), before a device run: for each pending patch, a source tree with the patch applied
# (.pending/NAME, from HEAD through git archive) and its lowered bench kernels
# (.lowered/pending_NAME, bench/make_kernels.sh with that tree's experts). Then on the device:
#   run(carry=[".debs", ".lowered", ".pending"], command="bash bench/sm90/pending/check.sh")
# .pending and .lowered are git-ignored: carry them.
set -euo pipefail
shopt -s nullglob
root="$(git rev-parse --show-toplevel)"
cd "$root"
grep -qx '.pending/' .git/info/exclude 2>/dev/null || echo '.pending/' >> .git/info/exclude
rm -rf .pending .lowered/pending_*
mkdir -p .pending
for patch in bench/sm90/pending/*.patch; do
  name="$(basename "$patch" .patch | sed -e 's/^[0-9]*-//' | cut -c1-32)"
  dir=".pending/$name"
  mkdir -p "$dir"
  git archive HEAD | tar -x -C "$dir"
  (cd "$dir" && patch -s -p1 < "$root/$patch")
  CUBRIDGE_EXPERTS_DIR="$root/$dir/cuir/experts" bash bench/make_kernels.sh ".lowered/pending_$name" >/dev/null
  echo "prepared $dir and .lowered/pending_$name"
done
