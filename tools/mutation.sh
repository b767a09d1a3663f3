#!/usr/bin/env bash
# Mutation testing of the core packages with gremlins (docs/testing.md,
# docs/mutants.md). Not part of `go test ./...`: it rebuilds and reruns a
# package's tests once per mutant, minutes per package.
#
#   tools/mutation.sh [PACKAGE[:FILE,...]...]   default: the list in $default below
#   OUT=/tmp/mut tools/mutation.sh ./protocol
#   tools/mutation.sh ./node/cluster/mesh:handshake.go,frame.go,session.go
#
# PACKAGE:FILE,... mutates only those files of the package (the others are
# passed to gremlins as --exclude-files); the package's whole test suite
# still judges every mutant. The mesh is run that way: its handshake
# (handshake.go, the frames in frame.go, the flow in session.go) is what
# SPEC §5 Identity rests on.
#
# gremlins is pinned and installed into GOPATH/bin with `go install`, never
# into this module's go.mod. It works on a copy of the module in a
# temporary directory; the checkout is not touched.
#
# Every LIVED mutant must be killed by a test naming the rule it protects,
# or listed in docs/mutants.md as equivalent with a reason. TIMED OUT means
# the tests took over coverage-time × the coefficient: on a busy machine
# raise COEFF rather than count those as killed.
#
# Do not pass gremlins --test-cpu: v0.6.0 hands `go test` "-cpu N" as one
# argument, every test run fails at once and every mutant counts as KILLED.
set -euo pipefail
cd "$(dirname "$0")/.."
version=v0.6.0
gopath_bin="$(go env GOPATH)/bin"
gremlins="$gopath_bin/gremlins"
if ! [ -x "$gremlins" ] || ! go version -m "$gremlins" 2>/dev/null | grep -q "gremlins.*$version"; then
  echo "mutation: installing github.com/go-gremlins/gremlins@$version into $gopath_bin" >&2
  (cd / && GOFLAGS=-mod=mod go install "github.com/go-gremlins/gremlins/cmd/gremlins@$version")
fi
default=(./protocol ./node/ticket ./node/clockhealth ./node/cluster/reconcile
  ./node/cluster/mesh:handshake.go,frame.go,session.go)
pkgs=("$@")
[ ${#pkgs[@]} -eq 0 ] && pkgs=("${default[@]}")
out=${OUT:-/tmp/tckclk-mutation}
coeff=${COEFF:-15}
mkdir -p "$out"
status=0
for arg in "${pkgs[@]}"; do
  pkg=${arg%%:*}
  name=$(echo "${pkg#./}" | tr / -)
  excl=()
  if [[ $arg == *:* ]]; then
    only=",${arg#*:},"
    name=$name-part
    for f in "$pkg"/*.go; do
      b=$(basename "$f")
      [[ $b == *_test.go || $only == *",$b,"* ]] && continue
      excl+=(--exclude-files "(^|/)${b//./\\.}\$")
    done
  fi
  echo "mutation: $pkg (log $out/$name.txt, results $out/$name.json)"
  # 2 shared cores: one worker, lowest priority.
  if ! nice -n 15 "$gremlins" unleash --workers 1 --timeout-coefficient "$coeff" \
      ${excl[@]+"${excl[@]}"} -o "$out/$name.json" "$pkg" >"$out/$name.txt" 2>&1; then
    echo "mutation: gremlins failed on $pkg, see $out/$name.txt" >&2
    status=1
  fi
  grep -E 'LIVED|TIMED OUT' "$out/$name.txt" || true
  grep -E '^(Killed|Timed out|Test efficacy|Mutator coverage)' "$out/$name.txt" | sed "s|^|mutation: $pkg: |"
done
exit $status
