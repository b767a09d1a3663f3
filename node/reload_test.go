package node

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"maps"
	"testing"
	"time"
)

// Issue 11 item 2: the trust map reloads on SIGHUP (Deps.Reload): a valid
// new map is taken, so a replacement node needs no restart of the others; a
// bad one (here: without this node's own entry) is refused and the old map
// stays; a config that does not load changes nothing.
func TestTrustMapReload(t *testing.T) {
	tc := newTestCluster(t, "node-a")
	reload := make(chan struct{})
	next := make(chan func() (Config, error), 1)
	tc.beforeStart = func(d *Deps, _ *testHooks) {
		d.Reload = reload
		d.ReloadConfig = func() (Config, error) { return (<-next)() }
	}
	cm := tc.start("node-a", "", 1)
	newKey := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	newPub := base64.StdEncoding.EncodeToString(newKey.Public().(ed25519.PublicKey))
	with := func(m map[string]string) func() (Config, error) {
		return func() (Config, error) {
			c := cm.an.cfg
			c.Cluster.Internode.TrustedPeerKeys = m
			return c, nil
		}
	}
	apply := func(f func() (Config, error)) {
		t.Helper()
		next <- f
		select {
		case reload <- struct{}{}:
		case <-time.After(5 * time.Second):
			t.Fatal("the run loop did not take the reload")
		}
	}
	grown := maps.Clone(tc.trust)
	grown["node-x"] = newPub
	apply(with(grown))
	waitFor(t, "node-x trusted", 5*time.Second, func() bool { _, ok := clusterOf(cm.n).Trust().Lookup("node-x"); return ok })

	apply(with(map[string]string{"node-x": newPub})) // no self entry: refused
	// The reload channel is unbuffered: this send is taken only once the
	// run loop has finished the reload before it.
	apply(func() (Config, error) { return Config{}, errors.New("config: does not parse") })
	_, self := clusterOf(cm.n).Trust().Lookup("node-a")
	_, x := clusterOf(cm.n).Trust().Lookup("node-x")
	if !self || !x {
		t.Fatalf("a refused reload changed the trust map (node-a %v, node-x %v)", self, x)
	}
}
