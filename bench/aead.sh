#!/usr/bin/env bash
# The mesh record layer's cost at 3 nodes, in one run: the ticketd of this
# checkout (every mesh byte sealed, node/cluster/mesh/seal.go) beside a
# throwaway copy of it (git archive HEAD into a temp dir, patched there,
# never committed) with the clients spread over the nodes, 64 and 256
# clients, one request per op, alternating rounds. BASELINE picks the
# copy's patch:
#   unsealed  the record layer off (the mesh's unsealed config forced on):
#             raw yamux over TCP, header and body of a frame in two writes
#   null      the record layer with a null AEAD (plaintext, zero tag): the
#             framing, copies and write coalescing kept, the cipher and MAC
#             gone — the cost of ChaCha20-Poly1305 alone
# SWAP=1 measures the copy first in each round (the order's effect).
# Prints per-round rows; the ratios are worked out from them (see
# bench/findings.md, "The record layer's cost").
#
#   bench/aead.sh                                  # unsealed, 12 rounds × 3 s
#   BASELINE=null PROFILE=/tmp/prof bench/aead.sh  # and the leaders' profiles
#
# Environment: BASELINE, SWAP, ROUNDS, DURATION, WARMUP, CLIENTS, OUT, PROFILE.
set -euo pipefail
cd "$(dirname "$0")/.."
BASELINE=${BASELINE:-unsealed}
ROUNDS=${ROUNDS:-12}
DURATION=${DURATION:-3s}
WARMUP=${WARMUP:-1s}
CLIENTS=${CLIENTS:-64,256}
OUT=${OUT:-/tmp/aead.md}
here=$(pwd)
copy=$(mktemp -d "${TMPDIR:-/tmp}/ticketd-$BASELINE.XXXXXX")
trap 'rm -rf "$copy"' EXIT
git archive HEAD | tar -x -C "$copy"
case $BASELINE in
unsealed)
  f=$copy/node/cluster/mesh/session.go
  sed -i 's/^\tif m\.cfg\.unsealed {$/\tif true || m.cfg.unsealed {/' "$f"
  grep -q 'if true || m.cfg.unsealed {' "$f" || { echo "bench: $f: the unsealed switch was not found" >&2; exit 2; } ;;
null)
  f=$copy/node/cluster/mesh/seal.go
  sed -i 's/return &Sealer{aead: a}, nil/_ = a; return \&Sealer{aead: nullAEAD{}}, nil/; s/return &Opener{aead: a}, nil/_ = a; return \&Opener{aead: nullAEAD{}}, nil/' "$f"
  [ "$(grep -c 'aead: nullAEAD{}' "$f")" = 2 ] || { echo "bench: $f: the sealer's and opener's constructors were not found" >&2; exit 2; }
  cat >>"$f" <<'GO'

type nullAEAD struct{}

func (nullAEAD) NonceSize() int { return chacha20poly1305.NonceSize }
func (nullAEAD) Overhead() int  { return recordOverhead }
func (nullAEAD) Seal(dst, _, plain, _ []byte) []byte {
	return append(append(dst, plain...), make([]byte, recordOverhead)...)
}
func (nullAEAD) Open(dst, _, ct, _ []byte) ([]byte, error) {
	return append(dst, ct[:len(ct)-recordOverhead]...), nil
}
GO
  ;;
*) echo "bench: BASELINE=$BASELINE is neither unsealed nor null" >&2; exit 2 ;;
esac
repo=$here base=$copy
if [ "${SWAP:-}" = 1 ]; then repo=$copy base=$here; fi
extra=()
if [ -n "${PROFILE:-}" ]; then extra=(-profile "$PROFILE"); fi
echo "bench: sealed ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', with changes')) against the $BASELINE copy; \"baseline\" rows are $( [ "${SWAP:-}" = 1 ] && echo sealed || echo "the $BASELINE copy")"
cd bench
go run ./cmd/tckbench -repo "$repo" -only ticketd -sections load -nodes 3 -clients "$CLIENTS" -contended-clients 0 \
  -rounds "$ROUNDS" -duration "$DURATION" -warmup "$WARMUP" -ticketd-client per-request \
  -placement spread -baseline-repo "$base" -out "$OUT" "${extra[@]}"
