package node

import (
	"crypto/subtle"

	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/node/clockhealth"
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

// loadAllSecrets reads the clock secret(s) when an agent is configured and
// withClock is set, then the API tokens, and checks them all distinct
// (loadSecrets).
func loadAllSecrets(cfg *Config, env secret.Lookup, withClock bool) (*clockhealth.Secrets, apiSecrets, error) {
	var clock *clockhealth.Secrets
	if withClock && cfg.Clock.HasAgent() {
		s, err := clockhealth.LoadSecrets(&cfg.Clock, env)
		if err != nil {
			return nil, apiSecrets{}, err
		}
		clock = &s
	}
	api, err := loadSecrets(cfg, env, clock)
	return clock, api, err
}

// loadSecrets reads api.token_file and api.admin_token_file (owner-only
// files, at least 32 bytes) and checks that every secret the node knows is
// distinct from every other (SPEC §1.4, §4.1): client token, admin token,
// the clock-agent secret(s) and the gossip key. clock holds the resolved
// clock secrets when an agent is configured (whatever their source: file,
// CLUSTER_CLOCK_AGENT_SECRET or CLUSTER_CLOCK_AGENT_SECRET_FILE); without
// one, the clock secret files and variable are compared if set. Errors name
// the key; no error ever contains a secret.
func loadSecrets(cfg *Config, env secret.Lookup, clock *clockhealth.Secrets) (apiSecrets, error) {
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
	files := []struct{ key, path string }{{"cluster.membership.secret_file", cfg.Cluster.Membership.SecretFile}}
	if clock != nil {
		key := "clock.secret_file"
		if v, ok := env(secret.EnvSecret); ok && v != "" {
			key = "environment " + secret.EnvSecret
		}
		all = append(all, namedSecret{key, clock.Current.Bytes()})
		if !clock.Next.IsZero() {
			all = append(all, namedSecret{"clock.next_secret_file", clock.Next.Bytes()})
		}
	} else {
		files = append(files, struct{ key, path string }{"clock.secret_file", cfg.Clock.SecretFile},
			struct{ key, path string }{"clock.next_secret_file", cfg.Clock.NextSecretFile})
		if v, ok := env(secret.EnvSecret); ok && v != "" {
			all = append(all, namedSecret{"environment " + secret.EnvSecret, []byte(v)})
		}
	}
	for _, c := range files {
		if c.path == "" {
			continue
		}
		b, err := secret.ReadFileRaw(c.path)
		if err != nil {
			return out, config.Errorf(c.key, "%v", err)
		}
		all = append(all, namedSecret{c.key, b})
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
