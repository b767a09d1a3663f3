package secret

import (
	"crypto/subtle"
	"fmt"
	"io"
	"os"
)

// Environment variables of SPEC §1.4.
const (
	EnvSecret     = "CLUSTER_CLOCK_AGENT_SECRET"
	EnvSecretFile = "CLUSTER_CLOCK_AGENT_SECRET_FILE"
	// MinLen is the shortest secret accepted (SPEC §1.4).
	MinLen = 32
)

// Secret holds secret bytes and refuses to print them.
type Secret struct {
	b      []byte
	origin string // where it came from, e.g. "file /etc/tckclk/secret" (never the value)
}

// New wraps b (copied) as a secret from origin, checking its length.
func New(b []byte, origin string) (Secret, error) {
	if len(b) < MinLen {
		return Secret{}, fmt.Errorf("secret: %s holds %d bytes; at least %d are required", origin, len(b), MinLen)
	}
	return Secret{b: append([]byte(nil), b...), origin: origin}, nil
}

// Bytes returns the secret bytes. Callers must not log them.
func (s Secret) Bytes() []byte { return s.b }

// Origin says where the secret came from (never its value).
func (s Secret) Origin() string { return s.origin }

// IsZero reports whether no secret is held.
func (s Secret) IsZero() bool { return len(s.b) == 0 }

// Equal compares two secrets in constant time.
func (s Secret) Equal(other []byte) bool {
	return len(s.b) == len(other) && subtle.ConstantTimeCompare(s.b, other) == 1
}

// String hides the value.
func (s Secret) String() string { return "[redacted]" }

// GoString hides the value from %#v.
func (s Secret) GoString() string { return "[redacted]" }

// Format hides the value from every fmt verb.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte("[redacted]")) }

// MarshalText hides the value from encoders (YAML, JSON).
func (s Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

// ReadFile reads a secret file: the file must not be readable, writable or
// executable by group or others, and a single trailing LF is dropped.
func ReadFile(path string) (Secret, error) {
	b, err := ReadFileRaw(path)
	if err != nil {
		return Secret{}, err
	}
	return New(b, "file "+path)
}

// ReadFileRaw reads a secret file with the mode check and LF rule of SPEC
// §1.4 but no length rule (for secrets of other shapes, e.g. base64 keys).
func ReadFileRaw(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("secret: %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secret: %s has mode %04o; it needs 0600 or stricter (no group or other access)", path, perm)
	}
	const limit = 64 << 10
	buf, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("secret: reading %s: %w", path, err)
	}
	if len(buf) > limit {
		return nil, fmt.Errorf("secret: %s is larger than %d bytes", path, limit)
	}
	if n := len(buf); n > 0 && buf[n-1] == '\n' {
		buf = buf[:n-1]
	}
	return buf, nil
}

// Lookup is os.LookupEnv; tests inject their own environment.
type Lookup func(key string) (string, bool)

// LoadClock resolves the clock-agent secret of SPEC §1.4 from the
// environment (CLUSTER_CLOCK_AGENT_SECRET or CLUSTER_CLOCK_AGENT_SECRET_FILE)
// or configFile (the config key or --secret-file flag). Exactly one source
// may be set: the variable and a file together are ambiguous, and so are two
// different files.
func LoadClock(env Lookup, configFile string) (Secret, error) {
	if env == nil {
		env = os.LookupEnv
	}
	val, hasVal := env(EnvSecret)
	envFile, hasEnvFile := env(EnvSecretFile)
	hasEnvFile = hasEnvFile && envFile != ""
	file := configFile
	switch {
	case hasEnvFile && configFile != "" && envFile != configFile:
		return Secret{}, fmt.Errorf("secret: %s names %s but the configuration names %s: ambiguous, set one", EnvSecretFile, envFile, configFile)
	case hasEnvFile:
		file = envFile
	}
	switch {
	case hasVal && file != "":
		return Secret{}, fmt.Errorf("secret: both %s and a secret file (%s) are set: ambiguous, set one", EnvSecret, file)
	case hasVal:
		return New([]byte(val), "environment "+EnvSecret)
	case file != "":
		return ReadFile(file)
	}
	return Secret{}, fmt.Errorf("secret: no clock secret: set %s, %s or the secret file option", EnvSecret, EnvSecretFile)
}
