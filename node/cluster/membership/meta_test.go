package membership

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/internal/clustertest/gossipforge"
)

// sampleKey is a fixed identity key for codec tests.
func sampleKey() ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(0x40 + i)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func sampleMeta() Meta {
	m := Meta{
		NodeID:            "node-1",
		Seq:               1_767_225_600_000_000_001,
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
	copy(m.PublicKey[:], sampleKey().Public().(ed25519.PublicKey))
	return m
}

func samplePub() ed25519.PublicKey { return sampleKey().Public().(ed25519.PublicKey) }

// fullMeta has every string at its longest.
func fullMeta() Meta {
	full := sampleMeta()
	full.NodeID = strings.Repeat("n", MaxNodeIDLen)
	full.MeshAddr = strings.Repeat("a", MaxMeshAddrLen-5) + ":7950"
	full.FailureDomain = strings.Repeat("d", MaxFailureDomainLen)
	full.Version = strings.Repeat("v", MaxVersionLen)
	full.Retired, full.Leaving = true, true
	full.Seq = ^uint64(0)
	return full
}

// SPEC §5 "Identity": signed metadata round-trips and verifies under the
// signer's key; the longest metadata stays well within memberlist's 512
// bytes (memberlist panics above memberlist.MetaMaxSize).
func TestMetaRoundTrip(t *testing.T) {
	key := sampleKey()
	for _, m := range []Meta{sampleMeta(), fullMeta()} {
		b, err := Encode(m, key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b, samplePub())
		if err != nil {
			t.Fatal(err)
		}
		if got != m {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
		}
		if b2, _ := Encode(got, key); !bytes.Equal(b, b2) {
			t.Fatal("re-encoding differs (ed25519 signatures are deterministic)")
		}
		if !bytes.Equal(got.Key(), m.PublicKey[:]) || len(got.Key()) != ed25519.PublicKeySize {
			t.Fatal("Key() differs from PublicKey")
		}
	}
	b, _ := Encode(fullMeta(), key)
	if len(b) != MaxEncodedLen {
		t.Fatalf("longest encoding is %d bytes, MaxEncodedLen says %d", len(b), MaxEncodedLen)
	}
	if MaxEncodedLen > MaxMetaSize*9/10 {
		t.Fatalf("longest encoding %d bytes is not well within memberlist's %d", MaxEncodedLen, MaxMetaSize)
	}
	typical, _ := Encode(sampleMeta(), key)
	t.Logf("encoded metadata: typical %d bytes, longest %d, memberlist's limit %d", len(typical), MaxEncodedLen, MaxMetaSize)
}

func TestMetaEncodeRefusesInvalid(t *testing.T) {
	key := sampleKey()
	for name, mut := range map[string]func(*Meta){
		"no node id":       func(m *Meta) { m.NodeID = "" },
		"node id space":    func(m *Meta) { m.NodeID = "node 1" },
		"node id too long": func(m *Meta) { m.NodeID = strings.Repeat("n", MaxNodeIDLen+1) },
		"seq 0":            func(m *Meta) { m.Seq = 0 },
		"zero key":         func(m *Meta) { m.PublicKey = [32]byte{} },
		"other key":        func(m *Meta) { m.PublicKey[0] ^= 1 },
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
		"mesh too long":    func(m *Meta) { m.MeshAddr = strings.Repeat("a", MaxMeshAddrLen-4) + ":7950" },
		"domain space":     func(m *Meta) { m.FailureDomain = "us east" },
		"domain too long":  func(m *Meta) { m.FailureDomain = strings.Repeat("d", MaxFailureDomainLen+1) },
		"version control":  func(m *Meta) { m.Version = "1.0\n" },
		"version too long": func(m *Meta) { m.Version = strings.Repeat("v", MaxVersionLen+1) },
		"version utf8":     func(m *Meta) { m.Version = "1.0-é" },
	} {
		m := sampleMeta()
		mut(&m)
		if _, err := Encode(m, key); !errors.Is(err, ErrMalformedMeta) {
			t.Errorf("%s: Encode err = %v, want ErrMalformedMeta", name, err)
		}
	}
	if _, err := Encode(sampleMeta(), key[:32]); !errors.Is(err, ErrMalformedMeta) {
		t.Errorf("a short signing key: %v", err)
	}
	ok := sampleMeta()
	ok.DeltaMs, ok.Role, ok.Bootstrap, ok.FailureDomain, ok.Version = MaxDeltaMs, RoleNone, BootstrapHasState, "", ""
	ok.MeshAddr = "[::1]:65535"
	if _, err := Encode(ok, key); err != nil {
		t.Fatalf("edge values refused: %v", err)
	}
	ok.DeltaMs = MinDeltaMs
	if _, err := Encode(ok, key); err != nil {
		t.Fatalf("Δ 2 refused: %v", err)
	}
}

// Offsets in the version-2 layout (see Encode).
const (
	offFlags     = 1
	offDelta     = 34
	offClock     = 37
	offRole      = 50
	offBootstrap = 51
	offExpect    = 52
	offSeq       = 57
)

func TestMetaDecodeStrict(t *testing.T) {
	good, err := Encode(sampleMeta(), sampleKey())
	if err != nil {
		t.Fatal(err)
	}
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	strs := len(good) - ed25519.SignatureSize
	cases := map[string]struct {
		in    []byte
		field string
	}{
		"empty":           {nil, "version"},
		"version 0":       {mod(func(b []byte) []byte { b[0] = 0; return b }), "version"},
		"version 3":       {mod(func(b []byte) []byte { b[0] = 3; return b }), "version"},
		"truncated fixed": {good[:fixedLen-1], "length"},
		"no strings":      {good[:fixedLen], "node_id"},
		"string past end": {good[:strs-1], "software_version"},
		"no signature":    {good[:strs], "signature"},
		"short signature": {good[:len(good)-1], "signature"},
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
		"seq 0":           {mod(func(b []byte) []byte { binary.BigEndian.PutUint64(b[offSeq:], 0); return b }), "seq"},
		"zero key":        {mod(func(b []byte) []byte { copy(b[2:34], make([]byte, 32)); return b }), "public_key"},
		"node id empty": {mod(func(b []byte) []byte {
			return append(append(b[:fixedLen:fixedLen], 0), b[fixedLen+1+len("node-1"):]...)
		}), "node_id"},
	}
	for name, c := range cases {
		for _, dec := range []func([]byte) (Meta, error){DecodeUnverified, func(b []byte) (Meta, error) { return Decode(b, samplePub()) }} {
			m, err := dec(c.in)
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
}

// SPEC §5 "Identity": metadata whose any byte was changed after signing —
// a flag (Retired), the clock state (FAILED), the sequence, the NodeId —
// is refused; so is metadata signed by another key, whatever key it
// advertises, and the earlier release's unsigned format.
func TestMetaSignatureRefusals(t *testing.T) {
	key, pub := sampleKey(), samplePub()
	good, err := Encode(sampleMeta(), key)
	if err != nil {
		t.Fatal(err)
	}
	for i := range good {
		for _, bit := range []byte{0x01, 0x80} {
			b := bytes.Clone(good)
			b[i] ^= bit
			m, err := Decode(b, pub)
			if err == nil {
				t.Fatalf("byte %d ^ %#x: accepted %+v", i, bit, m)
			}
			if m != (Meta{}) {
				t.Fatalf("byte %d: refused decode returned a non-zero Meta", i)
			}
		}
	}
	tamper := map[string]func([]byte){
		"retired flag":   func(b []byte) { b[offFlags] |= flagRetired },
		"clock FAILED":   func(b []byte) { b[offClock] = byte(ClockFailed) },
		"role standby":   func(b []byte) { b[offRole] = byte(RoleStandby) },
		"sequence":       func(b []byte) { b[offSeq+7]++ },
		"node id":        func(b []byte) { b[fixedLen+1] = 'm' },
		"signature byte": func(b []byte) { b[len(b)-1] ^= 1 },
	}
	for name, f := range tamper {
		b := bytes.Clone(good)
		f(b)
		if _, err := DecodeUnverified(b); err != nil {
			t.Fatalf("%s: the tampered encoding does not even parse (%v): the case tests nothing", name, err)
		}
		if _, err := Decode(b, pub); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: err = %v, want ErrBadSignature", name, err)
		}
	}

	// Another node's key: advertised as itself (an impostor) or with the
	// victim's public key (a forgery).
	_, other, _ := ed25519.GenerateKey(nil)
	imp := sampleMeta()
	copy(imp.PublicKey[:], other.Public().(ed25519.PublicKey))
	b, err := Encode(imp, other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(b, pub); !errors.Is(err, ErrKeyMismatch) {
		t.Errorf("an impostor's own key: err = %v, want ErrKeyMismatch", err)
	}
	forged := bytes.Clone(b)
	copy(forged[2:34], pub)
	body := forged[:len(forged)-ed25519.SignatureSize]
	copy(forged[len(body):], ed25519.Sign(other, signedBytes(body)))
	if _, err := Decode(forged, pub); !errors.Is(err, ErrBadSignature) {
		t.Errorf("signed by another key with the victim's public key: err = %v, want ErrBadSignature", err)
	}
	// The signature binds the context string: the same body signed
	// without it (as another protocol using the key might) is refused.
	bare := bytes.Clone(good)
	copy(bare[len(bare)-ed25519.SignatureSize:], ed25519.Sign(key, bare[:len(bare)-ed25519.SignatureSize]))
	if _, err := Decode(bare, pub); !errors.Is(err, ErrBadSignature) {
		t.Errorf("signed without the context: err = %v, want ErrBadSignature", err)
	}

	// The earlier release's format (version 1, no signature), with Retired
	// and a FAILED clock: what the forged alive of the adversarial trial
	// carried.
	v1 := gossipforge.LegacyMeta(pub, 500, "127.0.0.1:7950")
	if _, err := Decode(v1, pub); !errors.Is(err, ErrUnsigned) {
		t.Errorf("the unsigned format: err = %v, want ErrUnsigned", err)
	}
	if _, err := Decode(good, nil); !errors.Is(err, ErrKeyMismatch) {
		t.Errorf("no trusted key: err = %v, want ErrKeyMismatch", err)
	}
}

// The cost of verification, against parsing alone (the baseline in the
// same run): go test -run '^$' -bench Meta ./node/cluster/membership/
func BenchmarkMetaDecodeUnverified(b *testing.B) {
	enc, _ := Encode(sampleMeta(), sampleKey())
	for b.Loop() {
		if _, err := DecodeUnverified(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMetaDecodeVerified(b *testing.B) {
	enc, _ := Encode(sampleMeta(), sampleKey())
	pub := samplePub()
	for b.Loop() {
		if _, err := Decode(enc, pub); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMetaEncodeSigned(b *testing.B) {
	m, key := sampleMeta(), sampleKey()
	for b.Loop() {
		if _, err := Encode(m, key); err != nil {
			b.Fatal(err)
		}
	}
}

// A node says in its signed software version which log-entry formats it
// reads; a release from before the marker says nothing (0), and so does
// a malformed marker. The marker survives Encode and Decode, and the
// version stays within the field's bounds whatever the revision.
func TestEntryVersionMarker(t *testing.T) {
	for v, want := range map[string]int{
		"":                           0,
		"0.1.0-dev":                  0,
		"abc123+entries.4":           4,
		"+entries.12":                12,
		"rev+entries.4+entries.5":    5,
		"rev+entries.":               0,
		"rev+entries.x":              0,
		"rev+entries.0":              0,
		"rev+entries.4x":             0,
		"rev+entries.-4":             0,
		"rev+entries.99999999999999": 0,
	} {
		m := Meta{Version: v}
		if got := m.EntryVersion(); got != want {
			t.Errorf("EntryVersion of %q = %d, want %d", v, got, want)
		}
	}
	for _, rev := range []string{"", "unknown", "rolling-upgrade-build", "with space\tand tab", strings.Repeat("r", 100)} {
		m := sampleMeta()
		m.Version = SoftwareVersion(rev, 4)
		if len(m.Version) > MaxVersionLen || m.EntryVersion() != 4 {
			t.Fatalf("SoftwareVersion(%q) = %q (%d bytes), entries %d", rev, m.Version, len(m.Version), m.EntryVersion())
		}
		if len(rev) < 40 && !strings.HasPrefix(m.Version, strings.NewReplacer(" ", "_", "\t", "_").Replace(rev)) {
			t.Fatalf("SoftwareVersion(%q) = %q lost the revision", rev, m.Version)
		}
		b, err := Encode(m, sampleKey())
		if err != nil {
			t.Fatalf("encode %q: %v", m.Version, err)
		}
		back, err := Decode(b, samplePub())
		if err != nil || back.EntryVersion() != 4 {
			t.Fatalf("decode: %v, entries %d", err, back.EntryVersion())
		}
	}
}
