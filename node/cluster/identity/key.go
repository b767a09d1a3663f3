package identity

import (
	"bytes"
	"crypto/ed25519"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
)

// Configuration key paths named by this package's errors.
const (
	KeyPath     = "cluster.internode.identity_key"
	KeyFilePath = "cluster.internode.identity_key_file"
	TrustPath   = "cluster.internode.trusted_peer_keys"
)

// ErrKey is wrapped by every ParseKey error, for errors.Is.
var ErrKey = errors.New("identity: bad private key")

// ParseKey decodes an ed25519 private key: base64 (standard alphabet,
// padded or unpadded) of a 32-byte seed or of a 64-byte private key whose
// public half matches its seed. Surrounding whitespace, a trailing LF
// included, is dropped. Errors say what is wrong and never echo key bytes.
func ParseKey(b []byte) (ed25519.PrivateKey, error) {
	raw, err := decodeBase64(bytes.TrimSpace(b))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKey, err)
	}
	defer clear(raw)
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		k := ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])
		if subtle.ConstantTimeCompare(k[ed25519.SeedSize:], raw[ed25519.SeedSize:]) != 1 {
			clear(k)
			return nil, fmt.Errorf("%w: a 64-byte key must be seed || public key, and its public half does not match its seed", ErrKey)
		}
		return k, nil
	default:
		return nil, fmt.Errorf("%w: decodes to %d bytes; want 32 (ed25519 seed) or 64 (ed25519 private key)", ErrKey, len(raw))
	}
}

// decodeBase64 decodes standard base64, padded (when s ends in '=') or
// unpadded, strictly (no stray bits; CR and LF inside are skipped, as
// encoding/base64 does, so base64(1)'s wrapped output works). Its errors name
// a byte offset at most, never content.
func decodeBase64(s []byte) ([]byte, error) {
	if len(s) == 0 {
		return nil, errors.New("the value is empty")
	}
	enc := base64.RawStdEncoding.Strict()
	if s[len(s)-1] == '=' {
		enc = base64.StdEncoding.Strict()
	}
	out := make([]byte, enc.DecodedLen(len(s)))
	n, err := enc.Decode(out, s)
	if err != nil {
		clear(out)
		var ce base64.CorruptInputError
		if errors.As(err, &ce) {
			return nil, fmt.Errorf("not standard base64 (padded or unpadded): bad input at byte %d", int64(ce))
		}
		return nil, errors.New("not standard base64 (padded or unpadded)")
	}
	return out[:n], nil
}

// Load reads this node's private key from exactly one of the inline value
// (cluster.internode.identity_key) and a file (…identity_key_file, which
// must not be accessible by group or others: mode 0600 or stricter).
func Load(inline, file string) (ed25519.PrivateKey, error) {
	switch {
	case inline != "" && file != "":
		return nil, config.Errorf(KeyPath, "set either %s or %s, not both", KeyPath, KeyFilePath)
	case inline == "" && file == "":
		return nil, config.Errorf(KeyPath, "an ed25519 identity is required in cluster mode: set %s or %s", KeyPath, KeyFilePath)
	case inline != "":
		k, err := ParseKey([]byte(inline))
		if err != nil {
			return nil, config.Errorf(KeyPath, "%s", strings.TrimPrefix(err.Error(), "identity: "))
		}
		return k, nil
	}
	b, err := secret.ReadFileRaw(file)
	if err != nil {
		return nil, config.Errorf(KeyFilePath, "%s", strings.TrimPrefix(err.Error(), "secret: "))
	}
	defer clear(b)
	k, err := ParseKey(b)
	if err != nil {
		return nil, config.Errorf(KeyFilePath, "%s: %s", file, strings.TrimPrefix(err.Error(), "identity: "))
	}
	return k, nil
}
