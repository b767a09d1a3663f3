package membership

import (
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
)

// Configuration key paths this package's errors name.
const (
	KeySecret     = "cluster.membership.secret_key"
	KeySecretFile = "cluster.membership.secret_file"
	KeyJoinAddrs  = "cluster.membership.join_addrs"
)

// LoadSecret resolves the gossip encryption key (SPEC §5 "Membership") from
// exactly one of cluster.membership.secret_key (inline) and
// cluster.membership.secret_file (a file readable by its owner only, one
// trailing LF dropped). The value is standard base64 with padding,
// surrounding white space ignored, and must decode to 16, 24 or 32 bytes
// (AES-128/192/256, memberlist's key sizes).
//
// Every refusal is a *config.Error naming the key; no error ever contains
// the secret or a fragment of it.
func LoadSecret(inline, file string) ([]byte, error) {
	switch {
	case inline != "" && file != "":
		return nil, config.Errorf(KeySecretFile, "set either %s or %s, not both", KeySecret, KeySecretFile)
	case inline == "" && file == "":
		return nil, config.Errorf(KeySecret, "gossip is always encrypted: set %s or %s", KeySecret, KeySecretFile)
	}
	key, value := KeySecret, inline
	if file != "" {
		raw, err := secret.ReadFileRaw(file)
		if err != nil {
			return nil, config.Errorf(KeySecretFile, "%v", err) // path and mode only, never content
		}
		key, value = KeySecretFile, string(raw)
	}
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, config.Errorf(key, "empty")
	}
	b, err := base64.StdEncoding.Strict().DecodeString(value)
	if err != nil {
		return nil, config.Errorf(key, "not standard base64 (with padding)")
	}
	switch len(b) {
	case 16, 24, 32:
		return b, nil
	}
	return nil, config.Errorf(key, "decodes to %s bytes; want 16, 24 or 32", strconv.Itoa(len(b)))
}
