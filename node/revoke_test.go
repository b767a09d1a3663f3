package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

// adminConfig is testConfig with an admin token, and the client option
// that carries it.
func adminConfig(t *testing.T) (Config, client.Option) {
	t.Helper()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	adminTok := strings.Repeat("a", 40)
	cfg.API.AdminTokenFile = writeFile(t, dir, "admin.token", adminTok, 0o600)
	return cfg, client.WithAdminToken(adminTok)
}

// SPEC §4 (Revoke, admin): the holder can no longer renew (409 revoked);
// the ticket frees at its current server-side expiry, never earlier; Get,
// list and a watch (its modify index moves) show it revoked; a second
// revoke answers 200 again; a free ticket is a 404 and another token a 409;
// without the admin token nothing is revoked.
func TestRevokeSingleNode(t *testing.T) {
	clk, guard := newManualClock(), &switchGuard{}
	cfg, admin := adminConfig(t)
	tn := startNode(t, cfg, Deps{Wall: clk, Guard: guard}, admin)
	g, err := tn.c.Grant(bg, "job", "alice", 30)
	if err != nil {
		t.Fatal(err)
	}
	before, err := tn.c.Watch(bg, "job", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}} {
		if a := do(t, tn, "POST", "/v1/tickets/job/revoke", "", hdr...); a.status != 401 {
			t.Fatalf("revoke without the admin token: %d %s", a.status, a.raw)
		}
	}
	if _, err := tn.c.Revoke(bg, "job", g.Token+1); !errors.Is(err, client.ErrWrongToken) {
		t.Fatalf("revoke of another token: %v", err)
	}
	if _, err := tn.c.Revoke(bg, "nobody", 0); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("revoke of a free ticket: %v", err)
	}
	if cur, _ := tn.c.Get(bg, "job"); cur.Revoked {
		t.Fatal("a refused revoke revoked")
	}

	// A watch waiting on the ticket's index wakes for the revocation.
	woke := make(chan *client.Watched, 1)
	go func() {
		w, _ := tn.c.Watch(bg, "job", before.Index, time.Minute)
		woke <- w
	}()
	r, err := tn.c.Revoke(bg, "job", g.Token)
	if err != nil || !r.Revoked || r.Token != g.Token || r.Holder != "alice" {
		t.Fatalf("revoke: %+v %v", r, err)
	}
	select {
	case w := <-woke:
		if w == nil || w.Ticket == nil || !w.Ticket.Revoked || w.Index <= before.Index {
			t.Fatalf("watch woke with %+v", w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not wake for the revocation")
	}
	if again, err := tn.c.Revoke(bg, "job", 0); err != nil || !again.Revoked || again.ServerExpiryUnixMs != r.ServerExpiryUnixMs {
		t.Fatalf("second revoke: %+v %v", again, err)
	}
	cur, err := tn.c.Get(bg, "job")
	if err != nil || !cur.Revoked || cur.ServerExpiryUnixMs != r.ServerExpiryUnixMs {
		t.Fatalf("get after revoke: %+v %v", cur, err)
	}
	if l, err := tn.c.List(bg, "", 0); err != nil || len(l.Tickets) != 1 || !l.Tickets[0].Revoked {
		t.Fatalf("list after revoke: %+v %v", l, err)
	}
	a := do(t, tn, "GET", "/v1/tickets/job", "")
	if !strings.Contains(a.raw, `"revoked":true`) {
		t.Fatalf("GET shows %s", a.raw)
	}

	_, err = tn.c.Renew(bg, "job", "alice", g.Token, 30)
	var ce *client.Error
	if !errors.Is(err, client.ErrRevoked) || !errors.As(err, &ce) || ce.StatusCode != 409 || !strings.Contains(ce.Message, "stop using token") {
		t.Fatalf("renew of a revoked ticket: %v", err)
	}
	if _, err := tn.c.Grant(bg, "job", "alice", 30); !errors.Is(err, client.ErrRevoked) {
		t.Fatalf("the holder's grant of its revoked ticket: %v", err)
	}
	if _, err := tn.c.Grant(bg, "job", "bob", 30); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("another's grant before the expiry: %v", err)
	}
	// Never freed before its expiry: one ms before it, the expiry loop
	// (5 ms rounds) leaves it alone.
	clk.Advance(time.Duration(cur.ServerExpiryUnixMs-uint64(clk.Now().UnixMilli())-1) * time.Millisecond)
	calls := guard.calls.Load()
	waitFor(t, "five expiry-loop rounds", 5*time.Second, func() bool { return guard.calls.Load() >= calls+5 })
	if got, err := tn.c.Get(bg, "job"); err != nil || got.Token != g.Token {
		t.Fatalf("freed before its expiry: %+v %v", got, err)
	}
	clk.Advance(time.Millisecond)
	waitFor(t, "the revoked ticket to expire", 10*time.Second, gone(tn, "job"))
	if b, err := tn.c.Grant(bg, "job", "bob", 30); err != nil || b.Token <= g.Token {
		t.Fatalf("grant after the expiry: %+v %v", b, err)
	}
}

// SPEC §4.2 (Session) with SPEC §4 (Revoke): the holder's Session ends at
// its first renew after the revoke, long before its local deadline, with
// ErrRevoked; the ticket stays held until its expiry; Close releases it.
func TestRevokeEndsSession(t *testing.T) {
	cfg, admin := adminConfig(t)
	tn := startNode(t, cfg, Deps{}, admin)
	s, err := tn.c.NewSession(bg, "job", "alice", 3) // renews every second
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.Revoke(bg, "job", s.Token()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the revoke")
	}
	if !errors.Is(s.Err(), client.ErrSessionLost) || !errors.Is(s.Err(), client.ErrRevoked) {
		t.Fatalf("session error %v", s.Err())
	}
	if left := time.Until(s.Deadline()); left < 500*time.Millisecond {
		t.Fatalf("Done closed only %v before the deadline: not at the refused renew", left)
	}
	if cur, err := tn.c.Get(bg, "job"); err != nil || !cur.Revoked {
		t.Fatalf("after the session ended: %+v %v", cur, err)
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !gone(tn, "job")() {
		t.Fatal("the holder's release did not free its revoked ticket")
	}
}

// SPEC §4 (Revoke) and §4.1 (followers forward): a revoke sent to a
// follower is forwarded to the leader and committed there; reads through
// the follower show the ticket revoked (the flag travels in the forward
// frames); a renew through the follower is refused as revoked.
func TestRevokeThroughFollower(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "n1", "n2", "n3")
	adminTok := strings.Repeat("b", 40)
	withAdmin := func(c *Config) {
		c.API.AdminTokenFile = writeFile(t, t.TempDir(), "admin.token", adminTok, 0o600)
	}
	first := tc.startWith("n1", "", 3, withAdmin)
	tc.startWith("n2", first.gossipAddr(), 3, withAdmin)
	tc.startWith("n3", first.gossipAddr(), 3, withAdmin)
	leader := tc.leader()
	fc := tc.others(leader)[0]
	waitFor(t, "the follower knows the leader", 10*time.Second, func() bool {
		_, ok := fc.n.mode.route()
		return ok
	})
	c, err := client.New(fc.tn.url, client.WithAdminToken(adminTok), client.WithFailover(0))
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Grant(bg, "job", "alice", 30)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Revoke(bg, "job", 0)
	if err != nil || !r.Revoked || r.Token != g.Token {
		t.Fatalf("revoke through the follower: %+v %v", r, err)
	}
	if got, err := tc.nodes[leader].tn.c.Get(bg, "job"); err != nil || !got.Revoked {
		t.Fatalf("the leader reads %+v %v", got, err)
	}
	for what, read := range map[string]func() (bool, error){
		"get": func() (bool, error) { t, err := c.Get(bg, "job"); return err == nil && t.Revoked, err },
		"list": func() (bool, error) {
			l, err := c.List(bg, "", 0)
			return err == nil && len(l.Tickets) == 1 && l.Tickets[0].Revoked, err
		},
		"watch": func() (bool, error) {
			w, err := c.Watch(bg, "job", 0, 0)
			return err == nil && w.Ticket != nil && w.Ticket.Revoked, err
		},
	} {
		if ok, err := read(); !ok {
			t.Errorf("%s through the follower does not show the revocation (%v)", what, err)
		}
	}
	if _, err := c.Renew(bg, "job", "alice", g.Token, 30); !errors.Is(err, client.ErrRevoked) {
		t.Fatalf("renew through the follower: %v", err)
	}
	if _, err := c.Revoke(bg, "job", g.Token+1); !errors.Is(err, client.ErrWrongToken) {
		t.Fatalf("revoke of another token through the follower: %v", err)
	}
	if _, err := c.Revoke(bg, "free", 0); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("revoke of a free ticket through the follower: %v", err)
	}
}
