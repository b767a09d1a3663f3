package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/protocol"
)

// renewOp is a batch's renew op (lease as given: 0 and 251 are bad input).
func renewOp(name, holder string, token uint64, lease int64) wire.BatchOp {
	return wire.BatchOp{Op: "renew", Name: name, Holder: holder, Token: &token, LeaseS: &lease}
}

// singleOp posts one op to its own endpoint and returns its status and
// compacted body.
func singleOp(t *testing.T, url string, op wire.BatchOp) (int, string) {
	t.Helper()
	fields := map[string]any{"holder": op.Holder}
	if op.Token != nil {
		fields["token"] = *op.Token
	}
	if op.LeaseS != nil {
		fields["lease_s"] = *op.LeaseS
	}
	body, _ := json.Marshal(fields)
	resp, err := http.Post(url+"/v1/tickets/"+op.Name+"/"+op.Op, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var c bytes.Buffer
	_ = json.Compact(&c, raw)
	return resp.StatusCode, c.String()
}

func compact(raw json.RawMessage) string {
	var c bytes.Buffer
	_ = json.Compact(&c, raw)
	return c.String()
}

// SPEC §4, §4.1: the renew ops of one batch are one KeepAlive entry, and
// each gets exactly the answer its single endpoint gives — renewed, or
// refused per item (another token, another holder, not held, revoked: 409;
// a bad name, lease 0 or 251: 400, proposing nothing) — while a grant
// beside them is its own entry. Refused items change nothing; the clock
// is checked once for the whole KeepAlive, and a failed check refuses
// every renewal with nothing appended.
func TestBatchRenewsAsOneKeepAlive(t *testing.T) {
	clk, guard := newManualClock(), &switchGuard{}
	cfg, admin := adminConfig(t)
	var n *server
	// No expiry rounds (each checks the clock): the checks counted are the proposals'.
	tn := startNodeHooks(t, cfg, Deps{Wall: clk, Guard: guard, ExpiryInterval: time.Hour}, testHooks{built: func(s *server) { n = s }}, admin)
	tok := map[string]uint64{}
	for _, g := range [][2]string{{"a", "alice"}, {"b", "alice"}, {"c", "bob"}, {"d", "alice"}, {"rv", "alice"}} {
		l, err := tn.c.Grant(bg, g[0], g[1], 30)
		if err != nil {
			t.Fatal(err)
		}
		tok[g[0]] = l.Token
	}
	if _, err := tn.c.Revoke(bg, "rv", 0); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	ops := []wire.BatchOp{
		renewOp("a", "alice", tok["a"], 60),
		renewOp("b", "alice", tok["b"]+1, 60), // another token
		renewOp("c", "alice", tok["c"], 60),   // another holder
		renewOp("none", "alice", 1, 60),       // not held
		renewOp("rv", "alice", tok["rv"], 60), // revoked
		renewOp("-bad", "alice", 1, 60),       // 400
		renewOp("d", "alice", tok["d"], 0),    // 400
		renewOp("d", "alice", tok["d"], 251),  // 400
		renewOp("d", "alice", tok["d"], 45),   //
		renewOp("a", "alice", tok["a"], 90),   // again, after the first
		grantOp("e", "erin"),                  // its own entry
	}
	want := []int{200, 409, 409, 409, 409, 400, 400, 400, 200, 200, 200}
	before := map[string]string{}
	for _, name := range []string{"b", "c", "rv"} {
		before[name] = fmt.Sprint(tn.c.Get(bg, name))
	}
	idx, checks := n.fsm.Index(), guard.calls.Load()
	res := postBatch(t, tn.url, ops)
	if got := commandsAfter(t, n, idx); got != 2 {
		t.Fatalf("the batch appended %d entries, want 2 (one KeepAlive, one Grant)", got)
	}
	if got := guard.calls.Load() - checks; got != 2 {
		t.Fatalf("%d clock checks for one KeepAlive and one Grant, want 2", got)
	}
	for i, r := range res {
		if r.Status != want[i] {
			t.Errorf("op %d (%s %s): %d %s, want %d", i, ops[i].Op, ops[i].Name, r.Status, r.Body, want[i])
		}
	}
	var a wire.Grant
	_ = json.Unmarshal(res[9].Body, &a)
	recv := uint64(clk.Now().UnixMilli())
	if a.Token != tok["a"] || a.LeaseS != 90 || a.ConservativeValidBeforeUnixMs != recv+90_000 || a.RemainingMs != 90_000 {
		t.Fatalf("the second renewal of a: %s", res[9].Body)
	}
	now, _ := protocol.CeilUnixMs(clk.Now())
	if got, err := tn.c.Get(bg, "a"); err != nil || got.ServerExpiryUnixMs != now+90_000+cfg.Clock.DeltaMs {
		t.Fatalf("a after the batch: %+v %v, want expiry %d", got, err, now+90_000+cfg.Clock.DeltaMs)
	}
	for name, was := range before {
		if now := fmt.Sprint(tn.c.Get(bg, name)); now != was {
			t.Fatalf("%s changed by a refused renewal: %s, was %s", name, now, was)
		}
	}
	// Each renew op's answer is its single endpoint's (the clock has not
	// moved: a renewal done again answers the same).
	for i, op := range ops[:10] {
		status, body := singleOp(t, tn.url, op)
		if status != res[i].Status || body != compact(res[i].Body) {
			t.Errorf("op %d (%s %s): batch %d %s, single endpoint %d %s", i, op.Op, op.Name, res[i].Status, compact(res[i].Body), status, body)
		}
	}

	// A failed clock check refuses every renewal, appending nothing.
	guard.set(errors.New("clock bound above Δ/2"))
	idx = n.fsm.Index()
	for i, r := range postBatch(t, tn.url, ops[:1:1]) {
		if r.Status != 503 || !strings.Contains(string(r.Body), "clock") {
			t.Errorf("renewal %d with a failed clock check: %d %s", i, r.Status, r.Body)
		}
	}
	if n.fsm.Index() != idx {
		t.Fatal("a renewal refused by the clock check appended an entry")
	}
}
