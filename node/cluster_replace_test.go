package node

import (
	"bytes"
	"cmp"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/ctl"
	"github.com/tckclk/tckclk/node/stage"
)

// ticketctl runs the ticketctl command in this process.
func ticketctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := ctl.Main(bg, args, ctl.Env{Stdout: &out, Stderr: &errb, Now: time.Now,
		Getenv:     func(string) (string, bool) { return "", false },
		ReadSecret: os.ReadFile, Version: "test"})
	return code, out.String(), errb.String()
}

// SPEC §3.4, issue 12 item 3: ticketctl cluster replace OLD --with NEW.
// Three voters (max_voters 3, max_standbys 0), n4 an eligible node the
// bounds leave out, n5 a gossip-only client, n6 a NodeId recorded retired.
// Every refusal names OLD or NEW and changes nothing; then replacing a
// follower voter with n4 retires it, n4 joins as a non-voter, the
// reconciler promotes it and removes OLD, the command waits for that and
// says so; grants continue.
func TestClusterReplace(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "n1", "n2", "n3", "n4", "n5", "n6")
	tc.slow = true // six nodes: keep one leader through the steps on a loaded machine
	tokFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokFile, []byte(strings.Repeat("a", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	edit := func(c *Config) {
		c.Cluster.Raft.MaxVoters, c.Cluster.Raft.MaxStandbys = 3, 0
		c.API.AdminTokenFile = tokFile
	}
	first := tc.startWith("n1", "", 3, edit)
	tc.startWith("n2", first.gossipAddr(), 3, edit)
	tc.startWith("n3", first.gossipAddr(), 3, edit)
	lc := tc.nodes[tc.leader()]
	tc.startWith("n4", first.gossipAddr(), 0, edit)
	tc.startWith("n5", first.gossipAddr(), 0, func(c *Config) { edit(c); c.Cluster.Raft.Role = "client" })
	tc.startWith("n6", first.gossipAddr(), 0, edit)
	waitFor(t, "the leader sees six alive", 20*time.Second, func() bool { return aliveCount(lc.n) == 6 })
	waitFor(t, "n6 recorded retired", 20*time.Second, func() bool {
		l := tc.raftLeader()
		return l != nil && clusterOf(l.n).ProposeRetire(bg, "n6") == nil && l.n.fsm.IsRetired("n6")
	})
	want := map[string]raft.ServerSuffrage{"n1": raft.Voter, "n2": raft.Voter, "n3": raft.Voter}
	// roles is the leader now and a follower voter (leadership may move
	// under load; each refusal is asked of the leader of the moment).
	roles := func() (lc, follower *clusterMember) {
		waitFor(t, "a leader", 20*time.Second, func() bool { lc = tc.raftLeader(); return lc != nil && clusterOf(lc.n).Runner() != nil })
		for _, n := range []string{"n1", "n2", "n3"} {
			if n != lc.n.cfg.Cluster.Name {
				return lc, tc.nodes[n]
			}
		}
		panic("unreachable")
	}
	if lc, _ := roles(); !maps.Equal(suffrages(lc), want) {
		t.Fatalf("configuration %v, want %v", suffrages(lc), want)
	}
	refusals := []struct {
		onFollower bool
		old, new   string // "OLD": a follower voter, "LEADER": the leader
		is         error
		code, msg  string
	}{
		{true, "OLD", "n4", api.ErrNotLeader, "not_leader", "leader"},
		{false, "", "n4", api.ErrBadRequest, "bad_request", "old:"},
		{false, "OLD", "bad name", api.ErrBadRequest, "bad_request", "new:"},
		{false, "OLD", "OLD", api.ErrBadRequest, "bad_request", "old and new are both"},
		{false, "nobody", "n4", api.ErrNotFound, "not_found", `old "nobody" is not in the Raft configuration`},
		{false, "LEADER", "n4", api.ErrConflict, "is_leader", "transfer leadership first"},
		{false, "OLD", "n9", api.ErrNotFound, "not_found", `new "n9" is not an alive gossip member`},
		{false, "OLD", "n6", api.ErrConflict, "retired", `new "n6" is a retired NodeId`},
		{false, "OLD", "n5", api.ErrConflict, "not_eligible", `new "n5" is not Raft-eligible`},
		{false, "OLD", "LEADER", api.ErrConflict, "already_voter", "is already a voter"},
	}
	for _, r := range refusals {
		var err error
		var old, repl string
		for try := 0; try < 10; try++ {
			lc, f := roles()
			name := map[string]string{"OLD": f.n.cfg.Cluster.Name, "LEADER": lc.n.cfg.Cluster.Name}
			old, repl = cmp.Or(name[r.old], r.old), cmp.Or(name[r.new], r.new)
			on := lc
			if r.onFollower {
				on = f
			}
			if _, err = on.n.ReplaceMember(bg, old, repl); r.onFollower || !errors.Is(err, api.ErrNotLeader) {
				break // a leader that stepped down meanwhile: ask again
			}
		}
		var ae *api.Error
		if !errors.Is(err, r.is) || !errors.As(err, &ae) || ae.Code != r.code || !strings.Contains(ae.Message, r.msg) {
			t.Errorf("replace %q with %q: %v, want %s naming %q", old, repl, err, r.code, r.msg)
		}
	}
	lc, follower := roles()
	old := follower.n.cfg.Cluster.Name
	if s := suffrages(lc); !maps.Equal(s, want) || lc.n.fsm.IsRetired(old) {
		t.Fatalf("a refusal changed something: configuration %v, %s retired %v", s, old, lc.n.fsm.IsRetired(old))
	}
	// ticketctl's own usage refusals (exit 2), before any call.
	for _, args := range [][]string{{"cluster", "replace", old}, {"cluster", "--with", "n4"}, {"cluster", "swap", old, "--with", "n4"},
		{"cluster", "replace", old, "--with", old}, {"cluster", "replace", old, "--with", "n4", "--wait", "soon"}} {
		if code, _, errs := ticketctl(t, args...); code != 2 {
			t.Errorf("ticketctl %v: exit %d (%s), want 2", args, code, errs)
		}
	}
	// onLeader runs ticketctl against the leader of the moment, again if
	// that one stepped down before it answered.
	onLeader := func(args ...string) (code int, out, errs string) {
		for range 5 {
			l, _ := roles()
			code, out, errs = ticketctl(t, append([]string{"--addr", l.tn.url, "--admin-token-file", tokFile}, args...)...)
			if !strings.Contains(errs, "not_leader") {
				break
			}
		}
		return code, out, errs
	}
	// Through the server: a refusal is exit 1 with the server's message.
	code, _, errs := onLeader("cluster", "replace", old, "--with", "n5", "--wait", "1s")
	if code != 1 || !strings.Contains(errs, `new "n5" is not Raft-eligible`) {
		t.Fatalf("ticketctl replace with a client: exit %d, %q", code, errs)
	}

	start := time.Now()
	code, out, errs := onLeader("cluster", "replace", old, "--with", "n4", "--wait", "60s")
	if code != 0 || !strings.Contains(out, "replaced "+old+" with n4: n4 is a voter, "+old+" left the Raft configuration") {
		t.Fatalf("ticketctl cluster replace %s --with n4: exit %d, stdout %q, stderr %q", old, code, out, errs)
	}
	t.Logf("replace %s with n4 took %v: %s", old, time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
	nl := tc.raftLeader()
	if nl == nil {
		nl = lc
	}
	s := suffrages(nl)
	if s["n4"] != raft.Voter || slices.Contains(configIDs(nl), old) || len(s) != 3 {
		t.Fatalf("after replace: configuration %v, want n4 a voter and %s gone", s, old)
	}
	if !nl.n.fsm.IsRetired(old) {
		t.Fatalf("%s is not recorded retired", old)
	}
	firstGrant(t, []*clusterMember{tc.nodes["n4"], lc}, "after-replace", 10*time.Second)
	// issue 26 item 4: OLD, still running, says it was removed and serves
	// nothing: not ready, role removed, a Grant through it a 503 (not
	// forwarded to the leader).
	waitFor(t, old+" says it was removed", 10*time.Second, func() bool {
		st, err := follower.tn.c.Status(bg)
		return err == nil && st.Stage == string(stage.Removed)
	})
	if st, _ := follower.tn.c.Status(bg); st.Ready || st.Role != "removed" || st.Reason != "removed" {
		t.Fatalf("%s's status after its replacement: %+v", old, st)
	}
	var ce *client.Error
	if _, err := follower.tn.c.Grant(bg, "through-old", "h", 30); !errors.As(err, &ce) || ce.StatusCode != 503 || ce.Stage != string(stage.Removed) ||
		!strings.Contains(ce.Message, "retired and removed from the cluster") {
		t.Fatalf("grant through the replaced %s: %v, want 503 removed", old, err)
	}
	if _, err := follower.tn.c.Ready(bg); !errors.As(err, &ce) || ce.Stage != string(stage.Removed) {
		t.Fatalf("/readyz of the replaced %s: %v", old, err)
	}
	if _, ok := nl.n.fsm.Get("through-old"); ok {
		t.Fatal("the replaced node forwarded a grant")
	}
	// The retired NodeId stays out: another round adds nothing back.
	if r := clusterOf(nl.n).Runner(); r != nil {
		r.Trigger()
	}
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		if ids := configIDs(nl); slices.Contains(ids, old) {
			t.Fatalf("%s added back: %v", old, ids)
		}
		time.Sleep(20 * time.Millisecond) // poll interval of a bounded observation
	}
}
