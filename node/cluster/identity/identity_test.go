package identity_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/node/cluster/identity"
)

var seed = bytes.Repeat([]byte{7}, ed25519.SeedSize)

func keyOf(s []byte) ed25519.PrivateKey { return ed25519.NewKeyFromSeed(s) }

func pubB64(k ed25519.PrivateKey) string {
	return base64.StdEncoding.EncodeToString(k.Public().(ed25519.PublicKey))
}

func configPath(t *testing.T, err error) string {
	t.Helper()
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Fatalf("want *config.Error, got %T %v", err, err)
	}
	return ce.Path
}

// SPEC §5 Identity: a 32-byte seed or a 64-byte key, base64 std or raw.
func TestParseKey(t *testing.T) {
	k := keyOf(seed)
	bad64 := append(append([]byte(nil), k...), 0)[:64]
	bad64[63] ^= 1
	std := base64.StdEncoding.EncodeToString
	raw := base64.RawStdEncoding.EncodeToString
	cases := []struct {
		name, in string
		ok       bool
		msg      string
	}{
		{"seed padded", std(seed), true, ""},
		{"seed unpadded", raw(seed), true, ""},
		{"seed trailing LF", std(seed) + "\n", true, ""},
		{"seed surrounded by spaces", "  " + std(seed) + " \r\n", true, ""},
		{"64-byte key padded", std(k), true, ""},
		{"64-byte key unpadded", raw(k), true, ""},
		{"64-byte key, public half wrong", std(bad64), false, "public half does not match"},
		{"empty", "", false, "empty"},
		{"whitespace only", " \n", false, "empty"},
		{"31 bytes", std(seed[:31]), false, "decodes to 31 bytes"},
		{"33 bytes", std(append(seed, 1)), false, "decodes to 33 bytes"},
		{"url alphabet", strings.NewReplacer("+", "-", "/", "_").Replace(std(bytes.Repeat([]byte{0xfb}, 32))), false, "not standard base64"},
		// base64(1) wraps a 64-byte key's 88 characters at 76: line breaks inside are fine.
		{"64-byte key wrapped by base64(1)", std(k)[:76] + "\n" + std(k)[76:] + "\n", true, ""},
		{"inner space", std(seed)[:20] + " " + std(seed)[20:], false, "not standard base64"},
		{"wrong padding", raw(seed) + "==", false, "not standard base64"},
		{"not base64", "hello world!", false, "not standard base64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := identity.ParseKey([]byte(c.in))
			if c.ok {
				if err != nil {
					t.Fatal(err)
				}
				if !got.Equal(k) {
					t.Fatal("decoded key differs")
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, identity.ErrKey) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %q: want ErrKey and %q", err, c.msg)
			}
		})
	}
}

// Errors never echo key material, not even a prefix of a bad value.
func TestParseKeyErrorsHideKeyBytes(t *testing.T) {
	for _, in := range []string{
		base64.StdEncoding.EncodeToString(seed[:31]),
		base64.StdEncoding.EncodeToString(seed)[:30] + "!!",
		base64.StdEncoding.EncodeToString(append(seed, seed...)[:63]),
	} {
		_, err := identity.ParseKey([]byte(in))
		if err == nil {
			t.Fatalf("%q accepted", in)
		}
		if strings.Contains(err.Error(), in[:8]) || strings.Contains(err.Error(), "BwcH") {
			t.Fatalf("error %q echoes the key", err)
		}
	}
}

func writeKey(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "node.key")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// SPEC §5 Identity: identity_key xor identity_key_file, file 0600 or stricter.
func TestLoad(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(seed)
	okFile := writeKey(t, good+"\n", 0o600)
	ro := writeKey(t, good, 0o400)
	groupRead := writeKey(t, good, 0o640)
	otherRead := writeKey(t, good, 0o604)
	badFile := writeKey(t, "not a key", 0o600)
	cases := []struct {
		name, inline, file string
		path, msg          string // path "" = accepted
	}{
		{"inline", good, "", "", ""},
		{"file 0600", "", okFile, "", ""},
		{"file 0400", "", ro, "", ""},
		{"both", good, okFile, identity.KeyPath, "not both"},
		{"neither", "", "", identity.KeyPath, "required"},
		{"inline bad", "AAAA", "", identity.KeyPath, "decodes to 3 bytes"},
		{"file group-readable", "", groupRead, identity.KeyFilePath, "mode 0640; it needs 0600 or stricter"},
		{"file other-readable", "", otherRead, identity.KeyFilePath, "mode 0604; it needs 0600 or stricter"},
		{"file missing", "", filepath.Join(t.TempDir(), "none"), identity.KeyFilePath, "no such file"},
		{"file bad content", "", badFile, identity.KeyFilePath, "not standard base64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, err := identity.Load(c.inline, c.file)
			if c.path == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !k.Equal(keyOf(seed)) {
					t.Fatal("wrong key")
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if p := configPath(t, err); p != c.path || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %q (path %s): want path %s and %q", err, p, c.path, c.msg)
			}
			if strings.Contains(err.Error(), good[:10]) {
				t.Fatalf("error %q echoes the key", err)
			}
		})
	}
}

func threeNodes() (map[string]string, []ed25519.PrivateKey) {
	var keys []ed25519.PrivateKey
	m := map[string]string{}
	for i, name := range []string{"node-1", "node-2", "node-3"} {
		k := keyOf(bytes.Repeat([]byte{byte(i + 1)}, 32))
		keys = append(keys, k)
		m[name] = pubB64(k)
	}
	return m, keys
}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{}
	for a, b := range m {
		out[a] = b
	}
	if v == "" {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}

// SPEC §5 Identity: trusted_peer_keys is name → 32-byte public key.
func TestParseTrust(t *testing.T) {
	m, keys := threeNodes()
	pub1 := keys[0].Public().(ed25519.PublicKey)
	cases := []struct {
		name string
		m    map[string]string
		path string // "" = accepted
		msg  string
	}{
		{"good", m, "", ""},
		{"unpadded value", with(m, "node-4", base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))), "", ""},
		{"empty map", map[string]string{}, identity.TrustPath, "is empty"},
		{"nil map", nil, identity.TrustPath, "is empty"},
		{"short key", with(m, "node-2", base64.StdEncoding.EncodeToString(pub1[:31])), identity.TrustPath + ".node-2", "decodes to 31 bytes"},
		{"private key as value", with(m, "node-2", base64.StdEncoding.EncodeToString(keys[1])), identity.TrustPath + ".node-2", "decodes to 64 bytes"},
		{"not base64", with(m, "node-3", "??"), identity.TrustPath + ".node-3", "not standard base64"},
		{"empty value", with(m, "node-3", " "), identity.TrustPath + ".node-3", "empty"},
		{"bad name", with(m, "-x", pubB64(keyOf(bytes.Repeat([]byte{5}, 32)))), identity.TrustPath + `."-x"`, "must match"},
		{"name with space", with(m, "a b", pubB64(keyOf(bytes.Repeat([]byte{5}, 32)))), identity.TrustPath + `."a b"`, "must match"},
		{"name too long", with(m, strings.Repeat("a", 129), pubB64(keyOf(bytes.Repeat([]byte{5}, 32)))), "", "129 bytes"},
		{"duplicate key", with(m, "node-9", m["node-1"]), identity.TrustPath + ".node-9", `same public key as "node-1"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, err := identity.ParseTrust(c.m)
			if c.path == "" && c.msg == "" {
				if err != nil {
					t.Fatal(err)
				}
				got, ok := tr.Lookup("node-1")
				if !ok || !got.Equal(pub1) {
					t.Fatal("node-1 not trusted with its key")
				}
				if _, ok := tr.Lookup("node-7"); ok {
					t.Fatal("unknown node trusted")
				}
				if tr.Len() != len(c.m) || tr.IDs()[0] != "node-1" {
					t.Fatalf("Len %d IDs %v", tr.Len(), tr.IDs())
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			p := configPath(t, err)
			if c.path != "" && p != c.path || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %q (path %s): want path %s and %q", err, p, c.path, c.msg)
			}
		})
	}
}

// A caller mutating a looked-up key does not change the trust map.
func TestTrustLookupCopies(t *testing.T) {
	m, _ := threeNodes()
	tr, err := identity.ParseTrust(m)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := tr.Lookup("node-1")
	k[0] ^= 0xff
	k2, _ := tr.Lookup("node-1")
	if k.Equal(k2) {
		t.Fatal("Lookup exposes the map's key bytes")
	}
}

// SPEC §5 Identity: the map MUST hold this node's name with its own key.
func TestCheckSelf(t *testing.T) {
	m, keys := threeNodes()
	tr, err := identity.ParseTrust(m)
	if err != nil {
		t.Fatal(err)
	}
	pub := func(i int) ed25519.PublicKey { return keys[i].Public().(ed25519.PublicKey) }
	if err := tr.CheckSelf("node-2", pub(1)); err != nil {
		t.Fatal(err)
	}
	err = tr.CheckSelf("node-4", pub(1))
	if p := configPath(t, err); p != identity.TrustPath || !strings.Contains(err.Error(), `no entry for this node "node-4"`) {
		t.Fatalf("missing self: %v", err)
	}
	err = tr.CheckSelf("node-2", pub(0))
	if p := configPath(t, err); p != identity.TrustPath+".node-2" || !strings.Contains(err.Error(), "is not this node's public key") {
		t.Fatalf("wrong self key: %v", err)
	}
}

// SPEC §5 Identity: a bad reload is refused and the old map kept.
func TestStoreReplace(t *testing.T) {
	m, keys := threeNodes()
	self := keys[0].Public().(ed25519.PublicKey)
	if _, err := identity.NewStore("node-1", self, with(m, "node-1", "")); err == nil {
		t.Fatal("NewStore accepted a map without the self entry")
	}
	s, err := identity.NewStore("node-1", self, m)
	if err != nil {
		t.Fatal(err)
	}
	k4 := keyOf(bytes.Repeat([]byte{4}, 32))
	for name, bad := range map[string]map[string]string{
		"self removed":  with(with(m, "node-4", pubB64(k4)), "node-1", ""),
		"self changed":  with(m, "node-1", pubB64(k4)),
		"bad entry":     with(m, "node-4", "xx"),
		"empty":         {},
		"duplicate key": with(m, "node-4", m["node-2"]),
	} {
		if err := s.Replace(bad); err == nil {
			t.Fatalf("%s: accepted", name)
		}
		if _, ok := s.Lookup("node-3"); !ok {
			t.Fatalf("%s: old map lost", name)
		}
		if _, ok := s.Lookup("node-4"); ok {
			t.Fatalf("%s: part of the bad map applied", name)
		}
	}
	if err := s.Replace(with(with(m, "node-3", ""), "node-4", pubB64(k4))); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup("node-3"); ok {
		t.Fatal("removed node still trusted")
	}
	if got, ok := s.Lookup("node-4"); !ok || !got.Equal(k4.Public().(ed25519.PublicKey)) {
		t.Fatal("added node not trusted")
	}
	if s.Current().Len() != 3 {
		t.Fatalf("Current has %d entries", s.Current().Len())
	}
}

// SPEC §4/§5: NodeIds follow the ticket-name grammar.
func TestValidID(t *testing.T) {
	for id, ok := range map[string]bool{
		"node-1": true, "a": true, "9": true, "A.b_c:d-e": true, strings.Repeat("z", 128): true,
		"": false, "-a": false, ".a": false, "a b": false, "a/b": false, "é": false, strings.Repeat("z", 129): false, "a\n": false,
	} {
		if err := identity.ValidID(id); (err == nil) != ok {
			t.Errorf("ValidID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

// SPEC §3.4: a later generation NAME~G speaks with NAME's key; "~" is never
// part of a NodeId, so the split is unambiguous.
func TestTrustName(t *testing.T) {
	for id, want := range map[string]string{
		"node-1": "node-1", "node-1~2": "node-1", "node-1~17": "node-1", "a.b~3": "a.b", "~2": "", "": "",
	} {
		if got := identity.TrustName(id); got != want {
			t.Errorf("TrustName(%q) = %q, want %q", id, got, want)
		}
	}
	if identity.ValidID("node-1"+identity.GenerationSep+"2") == nil {
		t.Fatal("a NodeId may contain the generation separator")
	}
}

// A NodeId with its generation (what the mesh hello and a Raft dial carry):
// NAME or NAME~G in canonical form, nothing else.
func TestValidNodeID(t *testing.T) {
	for id, ok := range map[string]bool{
		"node-1": true, "node-1~2": true, "node-1~999999": true, "a.b~17": true,
		"": false, "~2": false, "node-1~": false, "node-1~1": false, "node-1~0": false, "node-1~02": false,
		"node-1~1000000": false, "node-1~x": false, "node-1~2~3": false, "-x~2": false, "node 1~2": false,
	} {
		if err := identity.ValidNodeID(id); (err == nil) != ok {
			t.Errorf("ValidNodeID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}
