#!/usr/bin/env bash
# scripts/fuzz.sh's findings on a folder of artifacts as libFuzzer names them: each finding
# once, a slow-unit- report (a unit over -report_slow_units, under the timeout) not at all.
set -euo pipefail
fuzz_sh=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for name in crash-1 leak-2 timeout-3 oom-4 slow-unit-5 slow-unit-6 notes.txt; do
  echo x >"$dir/$name"
done
got=$(bash "$fuzz_sh" findings "$dir" | xargs -n1 basename | tr '\n' ' ')
want="crash-1 leak-2 oom-4 timeout-3 "
if [ "$got" != "$want" ]; then
  echo "findings of $dir: got '$got', want '$want'" >&2
  exit 1
fi
rm "$dir"/crash-1 "$dir"/leak-2 "$dir"/timeout-3 "$dir"/oom-4
got=$(bash "$fuzz_sh" findings "$dir")
if [ -n "$got" ]; then
  echo "slow units counted as findings: $got" >&2
  exit 1
fi
echo "findings: 4 of 4, slow units: 0 of 2"
