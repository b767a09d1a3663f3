package membership

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tckclk/tckclk/internal/config"
)

func writeFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// SPEC §5 "Membership": secret_key xor secret_file, base64, 16/24/32 bytes;
// every refusal names the key and never echoes the value.
func TestLoadSecret(t *testing.T) {
	raw := []byte("0123456789abcdef0123456789abcdef")
	k32 := base64.StdEncoding.EncodeToString(raw)
	k16 := base64.StdEncoding.EncodeToString(raw[:16])
	k24 := base64.StdEncoding.EncodeToString(raw[:24])
	for _, c := range []struct {
		name, inline, file string
		want               int
	}{
		{"inline 32", k32, "", 32},
		{"inline 16", k16, "", 16},
		{"inline 24 with spaces", "  " + k24 + " ", "", 24},
		{"file 32 with LF", "", writeFile(t, k32+"\n", 0o600), 32},
		{"file 0400", "", writeFile(t, k16, 0o400), 16},
	} {
		b, err := LoadSecret(c.inline, c.file)
		if err != nil || len(b) != c.want {
			t.Errorf("%s: %d bytes, err %v; want %d", c.name, len(b), err, c.want)
		}
	}
	secretish := "c2VjcmV0LXNlY3JldC1zZWNyZXQ" // unpadded base64 of a 20-byte value
	for _, c := range []struct {
		name, inline, file, key string
	}{
		{"neither", "", "", KeySecret},
		{"both", k32, writeFile(t, k32, 0o600), KeySecretFile},
		{"bad base64", "!!" + secretish, "", KeySecret},
		{"unpadded", strings.TrimRight(k32, "="), "", KeySecret},
		{"url alphabet", strings.ReplaceAll(base64.StdEncoding.EncodeToString([]byte{0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb}), "+", "-"), "", KeySecret},
		{"length 20", base64.StdEncoding.EncodeToString(raw[:20]), "", KeySecret},
		{"length 33", base64.StdEncoding.EncodeToString(append(raw, 'x')), "", KeySecret},
		{"blank", "   ", "", KeySecret},
		{"file bad length", "", writeFile(t, base64.StdEncoding.EncodeToString(raw[:20]), 0o600), KeySecretFile},
		{"file group readable", "", writeFile(t, k32, 0o640), KeySecretFile},
		{"file other readable", "", writeFile(t, k32, 0o604), KeySecretFile},
		{"file missing", "", filepath.Join(t.TempDir(), "absent"), KeySecretFile},
		{"file bad base64", "", writeFile(t, secretish+"\n", 0o600), KeySecretFile},
	} {
		_, err := LoadSecret(c.inline, c.file)
		var ce *config.Error
		if !errors.As(err, &ce) {
			t.Errorf("%s: err = %v, want *config.Error", c.name, err)
			continue
		}
		if ce.Path != c.key {
			t.Errorf("%s: path %q, want %q (%v)", c.name, ce.Path, c.key, err)
		}
		for _, leak := range []string{k32, k16, secretish, strings.TrimRight(k32, "=")} {
			if strings.Contains(err.Error(), leak) || strings.Contains(err.Error(), leak[:12]) {
				t.Errorf("%s: error %q echoes the secret", c.name, err)
			}
		}
	}
}
