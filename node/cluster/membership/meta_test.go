package membership

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func sampleMeta() Meta {
	m := Meta{
		MeshAddr:          "127.0.0.1:7950",
		DeltaMs:           500,
		ProtocolVersion:   2,
		ClockState:        ClockHealthy,
		ClockBoundMs:      12,
		ClockSampleUnixMs: 1_767_225_600_000,
		RaftEligible:      true,
		RaftPriority:      -3,
		FailureDomain:     "us-east-1a",
		Role:              RoleVoter,
		Bootstrap:         BootstrapWaiting,
		BootstrapExpect:   3,
		DataDirOK:         true,
		Version:           "0.1.0-dev",
	}
	for i := range m.PublicKey {
		m.PublicKey[i] = byte(i + 1)
	}
	return m
}

// SPEC §5 "Membership": metadata round-trips and stays within memberlist's 512 bytes.
func TestMetaRoundTrip(t *testing.T) {
	full := sampleMeta()
	full.MeshAddr = strings.Repeat("a", MaxMeshAddrLen-5) + ":7950"
	full.FailureDomain = strings.Repeat("d", MaxFailureDomainLen)
	full.Version = strings.Repeat("v", MaxVersionLen)
	full.Retired, full.Leaving = true, true
	for _, m := range []Meta{sampleMeta(), full} {
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > MaxMetaSize {
			t.Fatalf("encoding is %d bytes, above %d", len(b), MaxMetaSize)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if got != m {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
		}
		b2, _ := Encode(got)
		if !bytes.Equal(b, b2) {
			t.Fatal("re-encoding differs")
		}
		if !bytes.Equal(got.Key(), m.PublicKey[:]) || len(got.Key()) != ed25519.PublicKeySize {
			t.Fatal("Key() differs from PublicKey")
		}
	}
}

func TestMetaEncodeRefusesInvalid(t *testing.T) {
	for name, mut := range map[string]func(*Meta){
		"zero key":         func(m *Meta) { m.PublicKey = [32]byte{} },
		"delta 1":          func(m *Meta) { m.DeltaMs = 1 },
		"delta 60001":      func(m *Meta) { m.DeltaMs = 60001 },
		"protocol 0":       func(m *Meta) { m.ProtocolVersion = 0 },
		"clock state 0":    func(m *Meta) { m.ClockState = 0 },
		"clock state 4":    func(m *Meta) { m.ClockState = 4 },
		"negative sample":  func(m *Meta) { m.ClockSampleUnixMs = -1 },
		"role 4":           func(m *Meta) { m.Role = 4 },
		"bootstrap 4":      func(m *Meta) { m.Bootstrap = 4 },
		"expect 33":        func(m *Meta) { m.BootstrapExpect = MaxBootstrapExpect + 1 },
		"mesh empty":       func(m *Meta) { m.MeshAddr = "" },
		"mesh no port":     func(m *Meta) { m.MeshAddr = "host" },
		"mesh port 0":      func(m *Meta) { m.MeshAddr = "host:0" },
		"mesh port 65536":  func(m *Meta) { m.MeshAddr = "host:65536" },
		"mesh port 07950":  func(m *Meta) { m.MeshAddr = "host:07950" },
		"mesh no host":     func(m *Meta) { m.MeshAddr = ":7950" },
		"mesh too long":    func(m *Meta) { m.MeshAddr = strings.Repeat("a", 252) + ":7950" },
		"domain space":     func(m *Meta) { m.FailureDomain = "us east" },
		"domain too long":  func(m *Meta) { m.FailureDomain = strings.Repeat("d", MaxFailureDomainLen+1) },
		"version control":  func(m *Meta) { m.Version = "1.0\n" },
		"version too long": func(m *Meta) { m.Version = strings.Repeat("v", MaxVersionLen+1) },
		"version utf8":     func(m *Meta) { m.Version = "1.0-é" },
	} {
		m := sampleMeta()
		mut(&m)
		if _, err := Encode(m); !errors.Is(err, ErrMalformedMeta) {
			t.Errorf("%s: Encode err = %v, want ErrMalformedMeta", name, err)
		}
	}
	ok := sampleMeta()
	ok.DeltaMs, ok.Role, ok.Bootstrap, ok.FailureDomain, ok.Version = MaxDeltaMs, RoleNone, BootstrapHasState, "", ""
	ok.MeshAddr = "[::1]:65535"
	if _, err := Encode(ok); err != nil {
		t.Fatalf("edge values refused: %v", err)
	}
	ok.DeltaMs = MinDeltaMs
	if _, err := Encode(ok); err != nil {
		t.Fatalf("Δ 2 refused: %v", err)
	}
}

// Offsets in the version-1 layout (see Encode).
const (
	offFlags     = 1
	offDelta     = 34
	offClock     = 37
	offRole      = 50
	offBootstrap = 51
	offExpect    = 52
)

func TestMetaDecodeStrict(t *testing.T) {
	good, err := Encode(sampleMeta())
	if err != nil {
		t.Fatal(err)
	}
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := map[string]struct {
		in    []byte
		field string
	}{
		"empty":           {nil, "version"},
		"version 0":       {mod(func(b []byte) []byte { b[0] = 0; return b }), "version"},
		"version 2":       {mod(func(b []byte) []byte { b[0] = 2; return b }), "version"},
		"truncated fixed": {good[:fixedLen-1], "length"},
		"no strings":      {good[:fixedLen], "mesh_addr"},
		"string past end": {good[:len(good)-1], "software_version"},
		"trailing byte":   {append(bytes.Clone(good), 0), "length"},
		"oversize":        {append(bytes.Clone(good), make([]byte, MaxMetaSize)...), "length"},
		"unknown flag":    {mod(func(b []byte) []byte { b[offFlags] |= 0x10; return b }), "flags"},
		"delta 0":         {mod(func(b []byte) []byte { binary.BigEndian.PutUint16(b[offDelta:], 0); return b }), "delta_ms"},
		"delta 65535":     {mod(func(b []byte) []byte { binary.BigEndian.PutUint16(b[offDelta:], 65535); return b }), "delta_ms"},
		"clock state 9":   {mod(func(b []byte) []byte { b[offClock] = 9; return b }), "clock_state"},
		"role 9":          {mod(func(b []byte) []byte { b[offRole] = 9; return b }), "role"},
		"bootstrap 9":     {mod(func(b []byte) []byte { b[offBootstrap] = 9; return b }), "bootstrap_state"},
		"expect 200":      {mod(func(b []byte) []byte { b[offExpect] = 200; return b }), "bootstrap_expect"},
		"sample negative": {mod(func(b []byte) []byte { b[42] = 0x80; return b }), "clock_sample_unix_ms"},
		"zero key":        {mod(func(b []byte) []byte { copy(b[2:34], make([]byte, 32)); return b }), "public_key"},
	}
	for name, c := range cases {
		m, err := Decode(c.in)
		var me *MetaError
		if !errors.As(err, &me) || !errors.Is(err, ErrMalformedMeta) {
			t.Errorf("%s: err = %v, want a *MetaError", name, err)
			continue
		}
		if me.Field != c.field {
			t.Errorf("%s: field %q, want %q (%v)", name, me.Field, c.field, err)
		}
		if m != (Meta{}) {
			t.Errorf("%s: refused decode returned a non-zero Meta", name)
		}
		if !strings.HasPrefix(err.Error(), "membership: meta ") {
			t.Errorf("%s: error %q lacks the package prefix", name, err)
		}
	}
}
