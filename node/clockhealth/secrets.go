package clockhealth

import (
	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/protocol"
)

// Secrets are the clock-agent secrets of SPEC §1.4: the current one and, while
// agents are being rolled, the next one (a MAC valid under either passes).
type Secrets struct {
	Current secret.Secret
	Next    secret.Secret // zero unless clock.next_secret_file is set
}

// LoadSecrets resolves clock.secret_file (or the CLUSTER_CLOCK_AGENT_SECRET*
// environment, SPEC §1.4) and clock.next_secret_file. env is os.LookupEnv in
// production. Errors are *config.Error naming the key (a start-up
// configuration problem), never the value.
func LoadSecrets(cfg *Config, env secret.Lookup) (Secrets, error) {
	cur, err := secret.LoadClock(env, cfg.SecretFile)
	if err != nil {
		return Secrets{}, config.Errorf("clock.secret_file", "%v", err)
	}
	s := Secrets{Current: cur}
	if cfg.NextSecretFile != "" {
		next, err := secret.ReadFile(cfg.NextSecretFile)
		if err != nil {
			return Secrets{}, config.Errorf("clock.next_secret_file", "%v", err)
		}
		s.Next = next
	}
	return s, nil
}

// Collides reports whether other (a cluster, admin or bootstrap secret) is
// byte-identical to either clock secret; SPEC §1.4 refuses to start then.
func (s Secrets) Collides(other []byte) bool {
	return len(other) > 0 && (s.Current.Equal(other) || (!s.Next.IsZero() && s.Next.Equal(other)))
}

// KeyRing returns the verification keys. With dev true (clock.dev_reference)
// it holds only dev_key = HMAC(secret, "TCKCLK/2 dev-reference") of each
// secret, so a development agent is accepted only when the operator said so,
// and a real agent's sample is then refused (SPEC §1.3, §2.2).
func KeyRing(current, next []byte, dev bool) protocol.KeyRing {
	var ring protocol.KeyRing
	for _, s := range [][]byte{current, next} {
		if len(s) == 0 {
			continue
		}
		if dev {
			ring = append(ring, protocol.NewKey(protocol.DevKey(s)))
		} else {
			ring = append(ring, protocol.NewKey(s))
		}
	}
	return ring
}
