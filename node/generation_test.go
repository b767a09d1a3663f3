package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/cluster/identity"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/protocol"
)

// genNow is the wall time of the generation tests.
var genNow = time.Unix(1_800_000_000, 0)

// genConfig is a cluster config named name on the data dir path (only the
// keys dataDirID reads matter).
func genConfig(path, name string) *Config {
	cfg := DefaultConfig()
	cfg.Cluster.Enabled, cfg.Cluster.Name, cfg.Cluster.Raft.DataDir = true, name, path
	return &cfg
}

// retiredDir makes a data dir at path that nodeID retired from with
// reason (a generation marker when nodeID is NAME~G and the dir has none
// yet, a file standing for
// its Raft state, the retired marker with floor).
func retiredDir(t *testing.T, path, nodeID, reason string, floor int) {
	t.Helper()
	d, err := datadir.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, g, _ := identity.SplitGeneration(nodeID); g > 1 && !d.Exists(datadir.GenerationFile) {
		if err := d.WriteGeneration(datadir.Generation{NodeID: nodeID}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(d.File("raft.db"), []byte("state of "+nodeID), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteRetirement(datadir.Retirement{Reason: reason, NodeID: nodeID, Floor: floor}); err != nil {
		t.Fatal(err)
	}
}

// asideDir makes a retired dir of nodeID kept aside beside path at at.
func asideDir(t *testing.T, path, nodeID string, at time.Time) string {
	t.Helper()
	p := datadir.AsidePath(path, nodeID, at)
	retiredDir(t, p, nodeID, "rtt", 0)
	return p
}

// entries is the sorted names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func openID(t *testing.T, cfg *Config, now time.Time) (string, error) {
	t.Helper()
	d, id, err := dataDirID(cfg, now, testLogger(t))
	if err == nil {
		d.Close()
	}
	return id, err
}

// SPEC §3.4: NAME is generation 1, NAME~G generation G; nothing else
// splits.
func TestSplitGeneration(t *testing.T) {
	for _, c := range []struct {
		id   string
		name string
		gen  int
		ok   bool
	}{
		{"n1", "n1", 1, true}, {"n1~2", "n1", 2, true}, {"n1~999999", "n1", 999999, true},
		{"n1~1", "n1", 0, false}, {"n1~0", "n1", 0, false}, {"n1~02", "n1", 0, false}, {"n1~", "n1", 0, false},
		{"n1~x", "n1", 0, false}, {"n1~1000000", "n1", 0, false}, {"~2", "", 0, false}, {"", "", 1, false},
	} {
		name, gen, ok := identity.SplitGeneration(c.id)
		if name != c.name || gen != c.gen || ok != c.ok {
			t.Errorf("SplitGeneration(%q) = %q, %d, %v; want %q, %d, %v", c.id, name, gen, ok, c.name, c.gen, c.ok)
		}
		if c.ok && identity.GenerationID(name, gen) != c.id {
			t.Errorf("GenerationID(%q, %d) = %q, want %q", name, gen, identity.GenerationID(name, gen), c.id)
		}
	}
}

// SPEC §3.4: a retired dir with auto_replace is moved aside as
// retired-<NodeId>-<unix_s> and a fresh dir of the next generation takes
// its place; the generation after that goes one higher, carrying the
// replacement times.
func TestRetiredDirReplacedByNextGeneration(t *testing.T) {
	parent := t.TempDir()
	path := filepath.Join(parent, "data")
	retiredDir(t, path, "n1", "rtt", 0)
	cfg := genConfig(path, "n1")
	id, err := openID(t, cfg, genNow)
	if err != nil || id != "n1~2" {
		t.Fatalf("dataDirID = %q, %v; want n1~2", id, err)
	}
	aside := filepath.Join(parent, fmt.Sprintf("retired-n1-%d", genNow.Unix()))
	if got := entries(t, parent); !slices.Equal(got, []string{"data", filepath.Base(aside)}) {
		t.Fatalf("parent holds %v", got)
	}
	if b, err := os.ReadFile(filepath.Join(aside, "raft.db")); err != nil || string(b) != "state of n1" {
		t.Fatalf("the aside dir lost the retired state: %q, %v", b, err)
	}
	if got := entries(t, path); !slices.Equal(got, []string{datadir.LockFile, datadir.GenerationFile}) {
		t.Fatalf("the fresh data dir holds %v", got)
	}
	// Started again (a restart of n1~2 before it failed): still n1~2.
	if id, err := openID(t, cfg, genNow.Add(time.Minute)); err != nil || id != "n1~2" {
		t.Fatalf("restart of the new generation: %q, %v", id, err)
	}
	// n1~2 retires in turn: n1~3, two replacements recorded.
	retiredDir(t, path, "n1~2", "bound", 0)
	if id, err := openID(t, cfg, genNow.Add(2*time.Minute)); err != nil || id != "n1~3" {
		t.Fatalf("after n1~2 retired: %q, %v; want n1~3", id, err)
	}
	d, err := datadir.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := d.ReadGeneration()
	d.Close()
	if err != nil || g.NodeID != "n1~3" || !slices.Equal(g.Replaced, []int64{genNow.Unix(), genNow.Add(2 * time.Minute).Unix()}) {
		t.Fatalf("generation marker %+v, %v", g, err)
	}
}

// SPEC §3.4: the next generation is above every one the node knows — the
// dirs kept aside and the cluster's floor in the marker — so a NodeId is
// never reused.
func TestNextGenerationAboveEveryKnown(t *testing.T) {
	t.Run("aside", func(t *testing.T) {
		parent := t.TempDir()
		path := filepath.Join(parent, "data")
		asideDir(t, path, "n1~4", genNow.Add(-2*time.Hour))
		asideDir(t, path, "n10~9", genNow.Add(-2*time.Hour)) // another name
		retiredDir(t, path, "n1~2", "rtt", 0)
		if id, err := openID(t, genConfig(path, "n1"), genNow); err != nil || id != "n1~5" {
			t.Fatalf("%q, %v; want n1~5", id, err)
		}
	})
	t.Run("floor", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "data")
		retiredDir(t, path, "n1", "nodeid_retired", 7)
		if id, err := openID(t, genConfig(path, "n1"), genNow); err != nil || id != "n1~8" {
			t.Fatalf("%q, %v; want n1~8", id, err)
		}
	})
	t.Run("fresh dir beside aside dirs", func(t *testing.T) {
		// An operator moved the retired dir away as the refusal said: the
		// new empty dir is the next generation, not NAME again.
		parent := t.TempDir()
		path := filepath.Join(parent, "data")
		asideDir(t, path, "n1~3", genNow.Add(-time.Minute))
		if id, err := openID(t, genConfig(path, "n1"), genNow); err != nil || id != "n1~4" {
			t.Fatalf("%q, %v; want n1~4", id, err)
		}
	})
	t.Run("first start", func(t *testing.T) {
		if id, err := openID(t, genConfig(filepath.Join(t.TempDir(), "data"), "n1"), genNow); err != nil || id != "n1" {
			t.Fatalf("%q, %v; want n1", id, err)
		}
	})
}

// assertRefused checks a refusal of the replacement: ErrRetired (exit 2)
// naming want, and nothing changed beside the data dir.
func assertRefused(t *testing.T, cfg *Config, want ...string) {
	t.Helper()
	parent := filepath.Dir(cfg.Cluster.Raft.DataDir)
	before := entries(t, parent)
	_, err := openID(t, cfg, genNow)
	if !errors.Is(err, ErrRetired) {
		t.Fatalf("dataDirID: %v, want a refusal (ErrRetired)", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not say %q", err, w)
		}
	}
	if after := entries(t, parent); !slices.Equal(before, after) {
		t.Fatalf("a refusal changed the parent: %v → %v", before, after)
	}
	if _, err := os.Stat(filepath.Join(cfg.Cluster.Raft.DataDir, datadir.RetiredFile)); err != nil {
		t.Fatalf("a refusal moved the retired dir: %v", err)
	}
}

// SPEC §3.4: a lying or misconfigured agent's reasons are refused (someone
// must look); the others are replaced.
func TestReplaceRefusedForLyingAgent(t *testing.T) {
	lying := map[protocol.Reason]bool{protocol.ReasonVersion: true, protocol.ReasonNonce: true, protocol.ReasonMAC: true,
		protocol.ReasonFormat: true, protocol.ReasonSize: true}
	for _, r := range []protocol.Reason{protocol.ReasonConnect, protocol.ReasonTimeout, protocol.ReasonIO, protocol.ReasonSize,
		protocol.ReasonFormat, protocol.ReasonVersion, protocol.ReasonNonce, protocol.ReasonMAC, protocol.ReasonUnsynced,
		protocol.ReasonSourceAge, protocol.ReasonUncertainty, protocol.ReasonRTT, protocol.ReasonOffset, protocol.ReasonBound,
		protocol.ReasonStale, protocol.ReasonRollback, protocol.ReasonStep} {
		t.Run(string(r), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "data")
			retiredDir(t, path, "n1", string(r), 0)
			cfg := genConfig(path, "n1")
			if lying[r] {
				assertRefused(t, cfg, "retired NodeId n1", string(r), "lied or is misconfigured", "tckclk-conformance", "mv "+path)
				return
			}
			if id, err := openID(t, cfg, genNow); err != nil || id != "n1~2" {
				t.Fatalf("%q, %v; want n1~2", id, err)
			}
		})
	}
	if !agentMisbehaved("clockhealth: FAILED (mac) agent 127.0.0.1:7970: bad mac") || agentMisbehaved("clockhealth: FAILED (rtt)") {
		t.Fatal("agentMisbehaved does not read a reason in parentheses")
	}
}

// SPEC §3.4: past cluster.auto_replace_max replacements of NAME within
// the last hour (counted from the dirs kept aside and the marker's
// times), and with auto_replace off, the start is refused; older
// replacements do not count.
func TestReplaceRefusedPastMaxOrOff(t *testing.T) {
	t.Run("max", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "data")
		for i := range 3 {
			asideDir(t, path, identity.GenerationID("n1", i+1), genNow.Add(-time.Duration(50-i)*time.Minute))
		}
		retiredDir(t, path, "n1~4", "rtt", 0)
		assertRefused(t, genConfig(path, "n1"), "n1 was replaced 3 times within the last hour (cluster.auto_replace_max 3)", "raise cluster.auto_replace_max")
		cfg := genConfig(path, "n1")
		cfg.Cluster.AutoReplaceMax = 4
		if id, err := openID(t, cfg, genNow); err != nil || id != "n1~5" {
			t.Fatalf("with max 4: %q, %v; want n1~5", id, err)
		}
	})
	t.Run("marker times count", func(t *testing.T) {
		// The dirs kept aside were pruned or lost: the times the marker
		// carried forward still count.
		path := filepath.Join(t.TempDir(), "data")
		retiredDir(t, path, "n1~4", "rtt", 0)
		d, err := datadir.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		err = d.WriteGeneration(datadir.Generation{NodeID: "n1~4", Replaced: []int64{genNow.Unix() - 3000, genNow.Unix() - 2000, genNow.Unix() - 1000}})
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		assertRefused(t, genConfig(path, "n1"), "replaced 3 times")
	})
	t.Run("older than an hour", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "data")
		for i := range 3 {
			asideDir(t, path, identity.GenerationID("n1", i+1), genNow.Add(-time.Duration(61+i)*time.Minute))
		}
		retiredDir(t, path, "n1~4", "rtt", 0)
		if id, err := openID(t, genConfig(path, "n1"), genNow); err != nil || id != "n1~5" {
			t.Fatalf("%q, %v; want n1~5", id, err)
		}
	})
	t.Run("max 0", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "data")
		retiredDir(t, path, "n1", "rtt", 0)
		cfg := genConfig(path, "n1")
		cfg.Cluster.AutoReplaceMax = 0
		assertRefused(t, cfg, "replaced 0 times", "cluster.auto_replace_max 0")
	})
	t.Run("off", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "data")
		retiredDir(t, path, "n1", "rtt", 0)
		cfg := genConfig(path, "n1")
		cfg.Cluster.AutoReplace = false
		assertRefused(t, cfg, "cluster.auto_replace is off", "new NodeId")
	})
	t.Run("single node", func(t *testing.T) {
		// A single node is never replaced (SPEC §4: it holds off); a
		// retired marker there is refused as before.
		path := filepath.Join(t.TempDir(), "data")
		retiredDir(t, path, "n1", "rtt", 0)
		cfg := genConfig(path, "n1")
		cfg.Cluster.Enabled = false
		var re *datadir.RetiredError
		if _, err := openID(t, cfg, genNow); !errors.As(err, &re) {
			t.Fatalf("%v, want the RetiredError", err)
		}
		if got := entries(t, filepath.Dir(path)); !slices.Equal(got, []string{"data"}) {
			t.Fatalf("a single node's start moved something: %v", got)
		}
	})
}

// The newest keepAside retired dirs of a name are kept; other names'
// are not touched.
func TestAsideDirsPruned(t *testing.T) {
	parent := t.TempDir()
	path := filepath.Join(parent, "data")
	var kept []string
	for i := range 4 {
		p := asideDir(t, path, identity.GenerationID("n1", i+1), genNow.Add(-time.Duration(10-i)*time.Hour))
		if i >= 2 {
			kept = append(kept, filepath.Base(p))
		}
	}
	other := filepath.Base(asideDir(t, path, "n2", genNow.Add(-20*time.Hour)))
	retiredDir(t, path, "n1~5", "rtt", 0)
	if id, err := openID(t, genConfig(path, "n1"), genNow); err != nil || id != "n1~6" {
		t.Fatalf("%q, %v; want n1~6", id, err)
	}
	want := append([]string{"data", other}, kept...)
	want = append(want, fmt.Sprintf("retired-n1~5-%d", genNow.Unix()))
	slices.Sort(want)
	if got := entries(t, parent); !slices.Equal(got, want) {
		t.Fatalf("beside the data dir: %v, want %v", got, want)
	}
}

// A data dir made for another name's generation is refused naming
// cluster.name; a retired marker naming another NodeId, or an unreadable
// generation marker, refuses too.
func TestGenerationMarkerOfAnotherName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	d, err := datadir.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	err = d.WriteGeneration(datadir.Generation{NodeID: "n2~3"})
	d.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openID(t, genConfig(path, "n1"), genNow); err == nil || !strings.Contains(err.Error(), "cluster.name") || !strings.Contains(err.Error(), "n2~3") {
		t.Fatalf("%v, want a refusal naming cluster.name and n2~3", err)
	}
	// A retired marker naming another name's NodeId (or a path) refuses.
	other := filepath.Join(t.TempDir(), "data")
	retiredDir(t, other, "../../n1", "rtt", 0)
	if _, err := openID(t, genConfig(other, "n1"), genNow); err == nil || !strings.Contains(err.Error(), datadir.RetiredFile) || !strings.Contains(err.Error(), "../../n1") {
		t.Fatalf("%v, want a refusal naming the retired marker's node_id", err)
	}
	if got := entries(t, filepath.Dir(other)); !slices.Equal(got, []string{"data"}) {
		t.Fatalf("the refusal changed %v", got)
	}
	if err := os.WriteFile(filepath.Join(path, datadir.GenerationFile), []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openID(t, genConfig(path, "n1"), genNow); err == nil || !strings.Contains(err.Error(), datadir.GenerationFile) {
		t.Fatalf("%v, want a refusal naming the generation marker", err)
	}
}

// Bad input: a retired dir that cannot be moved aside (its parent cannot
// be written: immutable here, as a read-only filesystem would be) is
// refused saying why, and nothing changes.
func TestRetiredDirCannotBeMovedAside(t *testing.T) {
	parent := t.TempDir()
	path := filepath.Join(parent, "data")
	retiredDir(t, path, "n1", "rtt", 0)
	lockParent(t, parent)
	assertRefused(t, genConfig(path, "n1"), "cannot be moved aside", "nothing was changed", "read-only filesystem or a full disk")
}

// lockParent makes dir refuse new entries and renames: chmod 0500 for an
// unprivileged user; root ignores modes, so chattr +i (skipped where the
// filesystem or the capability lacks it). Undone at cleanup.
func lockParent(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
		return
	}
	chattr, err := exec.LookPath("chattr")
	if err != nil {
		t.Skip("root ignores directory modes and chattr is absent (e2fsprogs): cannot make a directory unwritable")
	}
	if out, err := exec.Command(chattr, "+i", dir).CombinedOutput(); err != nil {
		t.Skipf("chattr +i %s: %v %s (the filesystem or capability lacks it)", dir, err, out)
	}
	t.Cleanup(func() { _ = exec.Command(chattr, "-i", dir).Run() })
}
