package fuzz

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"io"
	"regexp"
	"strconv"
	"testing"

	"github.com/tckclk/tckclk/node/cluster/membership"
)

// The naive metadata decoder: encoding/binary.Read into a struct, regular
// expressions for the strings, written from the layout documented on
// membership.Encode without using its code. It reports the first rule an
// input breaks, in the documented order, by field name ("" when accepted;
// "unsigned" for the earlier release's version 1).

type naiveMetaHeader struct {
	Version   uint8
	Flags     uint8
	Key       [32]byte
	DeltaMs   uint16
	Protocol  uint8
	Clock     uint8
	BoundMs   uint32
	SampleMs  int64
	Role      uint8
	Bootstrap uint8
	Expect    uint8
	Priority  int32
	Seq       uint64
}

var (
	naiveMetaText    = regexp.MustCompile(`^[\x21-\x7e]*$`)
	naiveHostPortBr  = regexp.MustCompile(`^\[([^\[\]]*)\]:([^:]*)$`)
	naiveHostPort    = regexp.MustCompile(`^([^:\[\]]*):([^:]*)$`)
	naiveCanonicPort = regexp.MustCompile(`^[1-9][0-9]{0,4}$`)
)

func naiveDecodeMeta(b []byte) (membership.Meta, string) {
	var m membership.Meta
	if len(b) > 512 {
		return m, "length"
	}
	if len(b) > 0 && b[0] == 1 {
		return m, "unsigned"
	}
	if len(b) == 0 || b[0] != 2 {
		return m, "version"
	}
	r := bytes.NewReader(b)
	var h naiveMetaHeader
	if err := binary.Read(r, binary.BigEndian, &h); err != nil {
		return m, "length"
	}
	if h.Flags > 0x0f {
		return m, "flags"
	}
	var strs []string
	for _, field := range []string{"node_id", "mesh_addr", "failure_domain", "software_version"} {
		n, err := r.ReadByte()
		if err != nil {
			return m, field
		}
		s := make([]byte, n)
		if _, err := io.ReadFull(r, s); err != nil {
			return m, field
		}
		strs = append(strs, string(s))
	}
	switch {
	case r.Len() < 64:
		return m, "signature"
	case r.Len() > 64:
		return m, "length"
	}
	switch {
	case strs[0] == "":
		return m, "node_id"
	case len(strs[0]) > 80 || !naiveMetaText.MatchString(strs[0]):
		return m, "node_id"
	case h.Seq == 0:
		return m, "seq"
	case h.Key == [32]byte{}:
		return m, "public_key"
	case h.DeltaMs < 2 || h.DeltaMs > 60000:
		return m, "delta_ms"
	case h.Protocol == 0:
		return m, "protocol_version"
	case h.Clock < 1 || h.Clock > 3:
		return m, "clock_state"
	case h.SampleMs < 0:
		return m, "clock_sample_unix_ms"
	case h.Role > 3:
		return m, "role"
	case h.Bootstrap > 3:
		return m, "bootstrap_state"
	case h.Expect > 32:
		return m, "bootstrap_expect"
	case !naiveMeshAddr(strs[1]):
		return m, "mesh_addr"
	case len(strs[2]) > 64 || !naiveMetaText.MatchString(strs[2]):
		return m, "failure_domain"
	case len(strs[3]) > 64 || !naiveMetaText.MatchString(strs[3]):
		return m, "software_version"
	}
	m = membership.Meta{
		NodeID: strs[0], Seq: h.Seq,
		MeshAddr: strs[1], PublicKey: h.Key, DeltaMs: h.DeltaMs, ProtocolVersion: h.Protocol,
		ClockState: membership.ClockState(h.Clock), ClockBoundMs: h.BoundMs, ClockSampleUnixMs: h.SampleMs,
		RaftEligible: h.Flags&1 != 0, Retired: h.Flags&2 != 0, DataDirOK: h.Flags&4 != 0, Leaving: h.Flags&8 != 0,
		RaftPriority: h.Priority, FailureDomain: strs[2], Role: membership.Role(h.Role),
		Bootstrap: membership.BootstrapState(h.Bootstrap), BootstrapExpect: h.Expect, Version: strs[3],
	}
	return m, ""
}

// naiveVerify is the signature rule as documented: ed25519 over the
// context string and every byte before the signature.
func naiveVerify(pub ed25519.PublicKey, b []byte) bool {
	body, sig := b[:len(b)-64], b[len(b)-64:]
	return ed25519.Verify(pub, append([]byte("TCKCLK gossip meta v2\x00"), body...), sig)
}

func naiveMeshAddr(s string) bool {
	if len(s) > 96 || !naiveMetaText.MatchString(s) {
		return false
	}
	sub := naiveHostPortBr.FindStringSubmatch(s)
	if sub == nil {
		sub = naiveHostPort.FindStringSubmatch(s)
	}
	if sub == nil || sub[1] == "" || !naiveCanonicPort.MatchString(sub[2]) {
		return false
	}
	p, _ := strconv.Atoi(sub[2])
	return p <= 65535
}

// fuzzMetaKey signs the seeds and every re-encoding.
var fuzzMetaKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x5a}, ed25519.SeedSize))

func metaSeeds() [][]byte {
	base := membership.Meta{
		NodeID: "node-1", Seq: 1_767_225_600_000_000_000,
		MeshAddr: "10.0.0.1:7950", DeltaMs: 500, ProtocolVersion: 2, ClockState: membership.ClockHealthy,
		ClockBoundMs: 9, ClockSampleUnixMs: 1_767_225_600_000, RaftEligible: true, RaftPriority: 1,
		FailureDomain: "rack-1", Role: membership.RoleVoter, Bootstrap: membership.BootstrapWaiting,
		BootstrapExpect: 3, DataDirOK: true, Version: "0.1.0",
	}
	copy(base.PublicKey[:], fuzzMetaKey.Public().(ed25519.PublicKey))
	client := base
	client.MeshAddr, client.Role, client.RaftEligible, client.FailureDomain, client.Version = "[::1]:65535", membership.RoleClient, false, "", ""
	client.Bootstrap, client.BootstrapExpect, client.ClockState, client.Leaving, client.Retired = membership.BootstrapHasState, 0, membership.ClockFailed, true, true
	client.NodeID, client.Seq = "n~2", 1
	var out [][]byte
	for _, m := range []membership.Meta{base, client} {
		b, err := membership.Encode(m, fuzzMetaKey)
		if err != nil {
			panic(err)
		}
		out = append(out, b, b[:len(b)-1], append(bytes.Clone(b), 0))
	}
	return out
}

// FuzzMembershipMeta: DecodeUnverified never panics; it agrees with the
// naive decoder on acceptance, the refused field and every decoded field;
// Decode accepts exactly what verifies under the advertised key (the
// naive rule); an accepted input re-signed under another key keeps every
// byte but the key and the signature, decodes to the same fields and
// stays within MaxEncodedLen.
func FuzzMembershipMeta(f *testing.F) {
	for _, s := range metaSeeds() {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := membership.DecodeUnverified(data)
		want, wantField := naiveDecodeMeta(data)
		if err != nil {
			if errors.Is(err, membership.ErrUnsigned) {
				if wantField != "unsigned" {
					t.Fatalf("Decode says unsigned, naive decoder says %q, for %q", wantField, data)
				}
				return
			}
			var me *membership.MetaError
			if !errors.As(err, &me) || !errors.Is(err, membership.ErrMalformedMeta) {
				t.Fatalf("refusal %v is not a *MetaError", err)
			}
			if me.Field != wantField {
				t.Fatalf("Decode refuses field %q (%v), naive decoder says %q, for %q", me.Field, err, wantField, data)
			}
			return
		}
		if wantField != "" {
			t.Fatalf("Decode accepts %q, naive decoder refuses field %q", data, wantField)
		}
		if got != want {
			t.Fatalf("Decode and the naive decoder differ:\n%+v\n%+v", got, want)
		}
		pub := got.Key()
		verified, err := membership.Decode(data, pub)
		if ok := naiveVerify(pub, data); ok != (err == nil) || ok && verified != got {
			t.Fatalf("Decode under the advertised key: %v; naive signature check: %v", err, ok)
		}
		resigned := got
		copy(resigned.PublicKey[:], fuzzMetaKey.Public().(ed25519.PublicKey))
		enc, err := membership.Encode(resigned, fuzzMetaKey)
		if err != nil {
			t.Fatalf("accepted meta does not re-encode: %v", err)
		}
		n := len(data) - 64
		if len(enc) != len(data) || !bytes.Equal(enc[:2], data[:2]) || !bytes.Equal(enc[34:n], data[34:n]) || len(enc) > membership.MaxEncodedLen {
			t.Fatalf("round trip: %q became %q", data, enc)
		}
		if back, err := membership.Decode(enc, fuzzMetaKey.Public().(ed25519.PublicKey)); err != nil || back != resigned {
			t.Fatalf("re-signed meta: %v, %+v", err, back)
		}
	})
}
