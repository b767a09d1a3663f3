package identity

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/tckclk/tckclk/internal/config"
)

// MaxIDLen is the longest NodeId.
const MaxIDLen = 128

// ValidID checks a NodeId: [A-Za-z0-9][A-Za-z0-9._:-]{0,127}, the grammar
// of ticket names (SPEC §4), so an id is safe in logs, metrics and paths.
func ValidID(id string) error {
	if id == "" {
		return fmt.Errorf("identity: node id is empty; it must match [A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("identity: node id is %d bytes long; at most %d are allowed", len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !idByte(id[i], i == 0) {
			return fmt.Errorf("identity: node id has %q at byte %d; it must match [A-Za-z0-9][A-Za-z0-9._:-]{0,127}", id[i], i)
		}
	}
	return nil
}

// GenerationSep separates a NodeId's name from its generation: NAME~G
// (SPEC §3.4). It is not a NodeId byte (ValidID), so the split is never
// ambiguous.
const GenerationSep = "~"

// TrustName is the trust-map name whose key speaks for nodeID: NAME for
// NAME~G (SPEC §3.4: the identity key, the trust-map name and the gossip
// name stay NAME's), nodeID itself otherwise.
func TrustName(nodeID string) string {
	name, _, _ := strings.Cut(nodeID, GenerationSep)
	return name
}

// MaxGeneration bounds G in NAME~G (a NodeId stays short; a name
// replaced more often than this is a machine to look at, not to restart).
const MaxGeneration = 999_999

// SplitGeneration splits a NodeId into its name and generation: NAME is
// generation 1, NAME~G generation G (2..=MaxGeneration, canonical
// decimal). ok is false for any other suffix.
func SplitGeneration(nodeID string) (name string, gen int, ok bool) {
	name, g, found := strings.Cut(nodeID, GenerationSep)
	if !found {
		return name, 1, name != ""
	}
	n, err := strconv.Atoi(g)
	if err != nil || n < 2 || n > MaxGeneration || strconv.Itoa(n) != g || name == "" {
		return name, 0, false
	}
	return name, n, true
}

// GenerationID is the NodeId of generation gen of name: name itself for
// generation 1 (or below), else NAME~G.
func GenerationID(name string, gen int) string {
	if gen <= 1 {
		return name
	}
	return name + GenerationSep + strconv.Itoa(gen)
}

// ValidNodeID checks a NodeId with its generation: NAME (a ValidID) or
// NAME~G in SplitGeneration's canonical form (G 2..=MaxGeneration, no
// leading zero).
func ValidNodeID(nodeID string) error {
	name, gen, ok := SplitGeneration(nodeID)
	if err := ValidID(name); err != nil {
		return err
	}
	if !ok || GenerationID(name, gen) != nodeID {
		return fmt.Errorf("identity: node id %q has a generation suffix other than %s2..%s%d", nodeID, GenerationSep, GenerationSep, MaxGeneration)
	}
	return nil
}

func idByte(c byte, first bool) bool {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return true
	}
	return !first && (c == '.' || c == '_' || c == ':' || c == '-')
}

// Trust is an immutable trust map: NodeId → ed25519 public key.
type Trust struct {
	keys map[string]ed25519.PublicKey
}

// ParseTrust validates cluster.internode.trusted_peer_keys: every name a
// valid NodeId, every value the base64 (standard, padded or unpadded) of a
// 32-byte ed25519 public key, no key listed under two names. The first bad
// entry in name order is reported, naming trusted_peer_keys.<name>.
func ParseTrust(m map[string]string) (*Trust, error) {
	if len(m) == 0 {
		return nil, config.Errorf(TrustPath, "is empty; it must map every node's name, this node's included, to its ed25519 public key")
	}
	t := &Trust{keys: make(map[string]ed25519.PublicKey, len(m))}
	owner := make(map[string]string, len(m)) // string(key) → name
	for _, name := range slices.Sorted(maps.Keys(m)) {
		path := entryPath(name)
		if err := ValidID(name); err != nil {
			return nil, config.Errorf(path, "%s", strings.TrimPrefix(err.Error(), "identity: "))
		}
		raw, err := decodeBase64(bytes.TrimSpace([]byte(m[name])))
		if err != nil {
			return nil, config.Errorf(path, "%v", err)
		}
		if len(raw) != ed25519.PublicKeySize {
			return nil, config.Errorf(path, "decodes to %d bytes; an ed25519 public key is 32", len(raw))
		}
		if other, dup := owner[string(raw)]; dup {
			return nil, config.Errorf(path, "has the same public key as %q; every node needs its own key", other)
		}
		owner[string(raw)] = name
		t.keys[name] = ed25519.PublicKey(raw)
	}
	return t, nil
}

// entryPath is the key path of one trust-map entry; a name that is not a
// valid NodeId is quoted so the path stays one printable token.
func entryPath(name string) string {
	if ValidID(name) != nil {
		name = strconv.Quote(name)
	}
	return TrustPath + "." + name
}

// Lookup returns the trusted public key of id.
func (t *Trust) Lookup(id string) (ed25519.PublicKey, bool) {
	k, ok := t.keys[id]
	return slices.Clone(k), ok
}

// Len is the number of trusted nodes.
func (t *Trust) Len() int { return len(t.keys) }

// IDs returns the trusted NodeIds in sorted order.
func (t *Trust) IDs() []string { return slices.Sorted(maps.Keys(t.keys)) }

// CheckSelf enforces the self rule: the map holds id with exactly pub.
func (t *Trust) CheckSelf(id string, pub ed25519.PublicKey) error {
	k, ok := t.keys[id]
	if !ok {
		return config.Errorf(TrustPath, "has no entry for this node %q; add %s: %q (this node's public key)",
			id, id, base64.StdEncoding.EncodeToString(pub))
	}
	if !k.Equal(pub) {
		return config.Errorf(entryPath(id), "is not this node's public key; the identity key's public key is %q",
			base64.StdEncoding.EncodeToString(pub))
	}
	return nil
}

// Store holds the current trust map for one node and swaps it atomically
// on reload. The zero Store is not usable; build one with NewStore.
type Store struct {
	self string
	pub  ed25519.PublicKey
	cur  atomic.Pointer[Trust]
}

// NewStore parses m and checks the self rule for this node (self, pub).
func NewStore(self string, pub ed25519.PublicKey, m map[string]string) (*Store, error) {
	s := &Store{self: self, pub: slices.Clone(pub)}
	if err := s.Replace(m); err != nil {
		return nil, err
	}
	return s, nil
}

// Replace validates m (ParseTrust and the self rule) and makes it current;
// on any error the previous map stays in force and the error says why.
func (s *Store) Replace(m map[string]string) error {
	t, err := ParseTrust(m)
	if err != nil {
		return err
	}
	if err := t.CheckSelf(s.self, s.pub); err != nil {
		return err
	}
	s.cur.Store(t)
	return nil
}

// Lookup returns id's key in the current trust map.
func (s *Store) Lookup(id string) (ed25519.PublicKey, bool) { return s.cur.Load().Lookup(id) }

// Current returns the trust map in force.
func (s *Store) Current() *Trust { return s.cur.Load() }
