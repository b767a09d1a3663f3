#!/usr/bin/env bash
# Runs every native Go fuzz target in the module, one after the other (go
# test -fuzz takes one target at a time), each for DURATION.
#
#   fuzz/run.sh [DURATION] [PACKAGE...]     e.g. fuzz/run.sh 30s
#                                                 fuzz/run.sh 2h ./fuzz
#
# New interesting inputs stay in Go's fuzz cache; a failing input is written
# under the package's testdata/fuzz/FuzzXxx/ and the script exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-30s}
shift || true
pkgs=("$@")
[ ${#pkgs[@]} -eq 0 ] && pkgs=(./...)

targets=$(go test -run '^$' -list '^Fuzz' "${pkgs[@]}" |
  awk '/^Fuzz/ {t[n++]=$1} /^ok/ {for (i = 0; i < n; i++) print $2, t[i]; n = 0}')
if [ -z "$targets" ]; then
  echo "fuzz: no targets found in ${pkgs[*]}" >&2
  exit 1
fi
count=$(printf '%s\n' "$targets" | wc -l)
echo "fuzz: $count targets, $dur each"
failed=0
while read -r pkg target; do
  dir="$(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$target"
  before=$(ls "$dir" 2>/dev/null | sort || true)
  log="/tmp/fuzz-$target.log"
  start=$(date +%s)
  if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$dur" "$pkg" >"$log" 2>&1; then
    echo "fuzz: PASS $pkg $target ran clean for $(( $(date +%s) - start ))s ($(grep -o 'execs: [0-9]*' "$log" | tail -1))"
    continue
  fi
  after=$(ls "$dir" 2>/dev/null | sort || true)
  # Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a
  # failure (golang/go#75804, fixed in Go 1.27). A real failure always writes
  # a reproducer under testdata/fuzz/; without one, and with exactly that
  # message, the run ended cleanly.
  if [ "$before" = "$after" ] && grep -q '^    context deadline exceeded$' "$log" && ! grep -q 'Failing input written' "$log"; then
    echo "fuzz: PASS $pkg $target ran clean for $(( $(date +%s) - start ))s ($(grep -o 'execs: [0-9]*' "$log" | tail -1)); the end-of-run deadline report is golang/go#75804, no failing input"
    continue
  fi
  failed=1
  echo "fuzz: FAIL $pkg $target"
  tail -30 "$log"
done <<<"$targets"
exit $failed
