package fuzz

import (
	"bytes"
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
// input breaks, in the documented order, by field name ("" when accepted).

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
	if len(b) == 0 || b[0] != 1 {
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
	for _, field := range []string{"mesh_addr", "failure_domain", "software_version"} {
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
	if r.Len() != 0 {
		return m, "length"
	}
	switch {
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
	case !naiveMeshAddr(strs[0]):
		return m, "mesh_addr"
	case len(strs[1]) > 64 || !naiveMetaText.MatchString(strs[1]):
		return m, "failure_domain"
	case len(strs[2]) > 64 || !naiveMetaText.MatchString(strs[2]):
		return m, "software_version"
	}
	m = membership.Meta{
		MeshAddr: strs[0], PublicKey: h.Key, DeltaMs: h.DeltaMs, ProtocolVersion: h.Protocol,
		ClockState: membership.ClockState(h.Clock), ClockBoundMs: h.BoundMs, ClockSampleUnixMs: h.SampleMs,
		RaftEligible: h.Flags&1 != 0, Retired: h.Flags&2 != 0, DataDirOK: h.Flags&4 != 0, Leaving: h.Flags&8 != 0,
		RaftPriority: h.Priority, FailureDomain: strs[1], Role: membership.Role(h.Role),
		Bootstrap: membership.BootstrapState(h.Bootstrap), BootstrapExpect: h.Expect, Version: strs[2],
	}
	return m, ""
}

func naiveMeshAddr(s string) bool {
	if len(s) > 255 || !naiveMetaText.MatchString(s) {
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

func metaSeeds() [][]byte {
	base := membership.Meta{
		MeshAddr: "10.0.0.1:7950", DeltaMs: 500, ProtocolVersion: 2, ClockState: membership.ClockHealthy,
		ClockBoundMs: 9, ClockSampleUnixMs: 1_767_225_600_000, RaftEligible: true, RaftPriority: 1,
		FailureDomain: "rack-1", Role: membership.RoleVoter, Bootstrap: membership.BootstrapWaiting,
		BootstrapExpect: 3, DataDirOK: true, Version: "0.1.0",
	}
	for i := range base.PublicKey {
		base.PublicKey[i] = byte(0xa0 + i)
	}
	client := base
	client.MeshAddr, client.Role, client.RaftEligible, client.FailureDomain, client.Version = "[::1]:65535", membership.RoleClient, false, "", ""
	client.Bootstrap, client.BootstrapExpect, client.ClockState, client.Leaving, client.Retired = membership.BootstrapHasState, 0, membership.ClockFailed, true, true
	var out [][]byte
	for _, m := range []membership.Meta{base, client} {
		b, err := membership.Encode(m)
		if err != nil {
			panic(err)
		}
		out = append(out, b, b[:len(b)-1], append(bytes.Clone(b), 0))
	}
	return out
}

// FuzzMembershipMeta: Decode never panics; it agrees with the naive
// decoder on acceptance, the refused field and every decoded field; an
// accepted input re-encodes byte-identically and within 512 bytes.
func FuzzMembershipMeta(f *testing.F) {
	for _, s := range metaSeeds() {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := membership.Decode(data)
		want, wantField := naiveDecodeMeta(data)
		if err != nil {
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
		enc, err := membership.Encode(got)
		if err != nil {
			t.Fatalf("accepted meta does not re-encode: %v", err)
		}
		if !bytes.Equal(enc, data) || len(enc) > membership.MaxMetaSize {
			t.Fatalf("round trip: %q became %q", data, enc)
		}
	})
}
