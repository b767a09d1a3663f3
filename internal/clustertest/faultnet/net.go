package faultnet

import (
	"errors"
	"hash/fnv"
	"math/rand"
	"net"
	"sort"
	"sync"
	"time"
)

// Rule is what happens to traffic on one directed link. The zero Rule is
// a healthy link.
type Rule struct {
	Cut    bool          // hold stream bytes, drop packets, fail new streams (see the package doc)
	Delay  time.Duration // fixed latency per stream Read/Write and per packet
	Jitter time.Duration // plus a uniform [0, Jitter) from the link's seeded RNG
	Drop   float64       // probability a gossip packet is dropped (0..1)
}

// ErrCut is the error of a dial between two nodes while either direction
// between them is cut.
var ErrCut = errors.New("faultnet: link cut")

type link struct{ from, to string }

// Net holds the rules and the address book. Its methods are safe for
// concurrent use.
type Net struct {
	seed int64

	mu      sync.Mutex
	names   map[string]string // address → node name
	rules   map[link]Rule
	rngs    map[rngKey]*rand.Rand
	changed chan struct{}      // closed and replaced whenever a rule changes
	conns   map[*conn]struct{} // the live wrapped streams (Reset)
}

// New returns a Net with no rules whose links draw drops and jitter from
// RNGs seeded by seed.
func New(seed int64) *Net {
	return &Net{seed: seed, names: map[string]string{}, rules: map[link]Rule{},
		rngs: map[rngKey]*rand.Rand{}, changed: make(chan struct{}), conns: map[*conn]struct{}{}}
}

// Register names the node listening on addr (host:port, as peers dial or
// send to it). A node may have several addresses (mesh and gossip).
func (n *Net) Register(name, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.names[addr] = name
}

// Listener registers ln's address as name and returns ln unchanged (for
// mesh.Config.WrapListener).
func (n *Net) Listener(name string, ln net.Listener) net.Listener {
	n.Register(name, ln.Addr().String())
	return ln
}

// Name is the node registered at addr, or "".
func (n *Net) Name(addr string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.names[addr]
}

// Names lists the registered node names, sorted.
func (n *Net) Names() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.namesLocked()
}

func (n *Net) namesLocked() []string {
	seen := map[string]bool{}
	var out []string
	for _, name := range n.names {
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Set replaces the rule on the link from → to (the zero Rule heals it).
func (n *Net) Set(from, to string, r Rule) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.setLocked(from, to, r)
	n.notifyLocked()
}

func (n *Net) setLocked(from, to string, r Rule) {
	if r == (Rule{}) {
		delete(n.rules, link{from, to})
	} else {
		n.rules[link{from, to}] = r
	}
}

func (n *Net) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// Rule is the rule on the link from → to now.
func (n *Net) Rule(from, to string) Rule {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rules[link{from, to}]
}

// update edits the rule on from → to with f.
func (n *Net) update(from, to string, f func(*Rule)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.rules[link{from, to}]
	f(&r)
	n.setLocked(from, to, r)
	n.notifyLocked()
}

// Cut cuts from → to only (to → from keeps working), keeping its delay
// and drop settings.
func (n *Net) Cut(from, to string) { n.update(from, to, func(r *Rule) { r.Cut = true }) }

// Partition cuts a and b apart both ways.
func (n *Net) Partition(a, b string) {
	n.Cut(a, b)
	n.Cut(b, a)
}

// Isolate cuts name off from every other registered node, both ways.
func (n *Net) Isolate(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, other := range n.namesLocked() {
		if other == name {
			continue
		}
		for _, l := range []link{{name, other}, {other, name}} {
			r := n.rules[l]
			r.Cut = true
			n.setLocked(l.from, l.to, r)
		}
	}
	n.notifyLocked()
}

// Reset ends every live stream between a and b (either direction) as a
// TCP reset does when a process dies: what is queued either way is lost,
// the wrapped end reads and writes ECONNRESET, the other end reads EOF.
// Rules are unchanged: a new stream may be dialed at once unless the link
// is cut. It returns how many streams it ended.
func (n *Net) Reset(a, b string) int {
	n.mu.Lock()
	var hit []*conn
	for c := range n.conns {
		if c.out.from == a && c.out.to == b || c.out.from == b && c.out.to == a {
			hit = append(hit, c)
			delete(n.conns, c)
		}
	}
	n.mu.Unlock()
	for _, c := range hit {
		c.reset()
	}
	return len(hit)
}

// Heal removes every rule on from → to (cut, delay and drop).
func (n *Net) Heal(from, to string) { n.Set(from, to, Rule{}) }

// HealAll removes every rule on every link.
func (n *Net) HealAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rules = map[link]Rule{}
	n.notifyLocked()
}

// state is the rule on from → to now and a channel closed at the next
// change of any rule.
func (n *Net) state(from, to string) (Rule, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rules[link{from, to}], n.changed
}

// cutEither: a new stream between a and b fails.
func (n *Net) cutEither(a, b string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rules[link{a, b}].Cut || n.rules[link{b, a}].Cut
}

// wait is Delay plus a jitter drawn from the link's RNG (0 without one).
func (n *Net) wait(from, to string, r Rule) time.Duration {
	d := r.Delay
	if r.Jitter > 0 {
		n.mu.Lock()
		d += time.Duration(n.rngLocked(rngJitter, from, to).Int63n(int64(r.Jitter)))
		n.mu.Unlock()
	}
	return d
}

// dropped draws the link's verdict for one packet under r.
func (n *Net) dropped(from, to string, r Rule) bool {
	if r.Cut {
		return true
	}
	if r.Drop <= 0 {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rngLocked(rngDrop, from, to).Float64() < r.Drop
}

// The jitter and the drop draws of a link come from separate RNGs, so a
// stream's jitter never shifts the link's packet drop sequence.
const (
	rngDrop byte = iota
	rngJitter
)

type rngKey struct {
	kind byte
	link
}

func (n *Net) rngLocked(kind byte, from, to string) *rand.Rand {
	l := rngKey{kind, link{from, to}}
	r, ok := n.rngs[l]
	if !ok {
		h := fnv.New64a()
		h.Write([]byte{kind})
		h.Write([]byte(from))
		h.Write([]byte{0})
		h.Write([]byte(to))
		r = rand.New(rand.NewSource(n.seed ^ int64(h.Sum64())))
		n.rngs[l] = r
	}
	return r
}
