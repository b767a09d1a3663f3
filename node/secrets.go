package node

import (
	"crypto/subtle"
	"os"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
)

// apiSecrets are the bearer tokens of the API.
type apiSecrets struct {
	client []byte // nil: no client token required
	admin  []byte // nil: admin API disabled
}

type namedSecret struct {
	key string
	b   []byte
}

// loadSecrets reads api.token_file and api.admin_token_file (owner-only
// files, at least 32 bytes) and checks that every secret the node knows is
// distinct from every other (SPEC §1.4, §4.1): client token, admin token,
// the clock-agent secret(s) and the gossip key. Errors name the key; no
// error ever contains a secret.
func loadSecrets(cfg *Config) (apiSecrets, error) {
	var out apiSecrets
	var all []namedSecret
	read := func(key, path string) ([]byte, error) {
		s, err := secret.ReadFile(path)
		if err != nil {
			return nil, config.Errorf(key, "%v", err)
		}
		return s.Bytes(), nil
	}
	if f := cfg.API.TokenFile; f != "" {
		b, err := read("api.token_file", f)
		if err != nil {
			return out, err
		}
		out.client = b
		all = append(all, namedSecret{"api.token_file", b})
	}
	if f := cfg.API.AdminTokenFile; f != "" {
		b, err := read("api.admin_token_file", f)
		if err != nil {
			return out, err
		}
		out.admin = b
		all = append(all, namedSecret{"api.admin_token_file", b})
	}
	for _, c := range []struct{ key, path string }{
		{"clock.secret_file", cfg.Clock.SecretFile},
		{"clock.next_secret_file", cfg.Clock.NextSecretFile},
		{"cluster.membership.secret_file", cfg.Cluster.Membership.SecretFile},
	} {
		if c.path == "" {
			continue
		}
		b, err := secret.ReadFileRaw(c.path)
		if err != nil {
			return out, config.Errorf(c.key, "%v", err)
		}
		all = append(all, namedSecret{c.key, b})
	}
	if v, ok := os.LookupEnv(secret.EnvSecret); ok && v != "" {
		all = append(all, namedSecret{"environment " + secret.EnvSecret, []byte(v)})
	}
	if k := cfg.Cluster.Membership.SecretKey; k != "" {
		all = append(all, namedSecret{"cluster.membership.secret_key", []byte(k)})
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			a, b := all[i].b, all[j].b
			if len(a) == len(b) && subtle.ConstantTimeCompare(a, b) == 1 {
				return out, config.Errorf(all[j].key, "holds the same secret as %s; every secret must be distinct", all[i].key)
			}
		}
	}
	return out, nil
}
