package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
)

// postBatch sends ops as one POST /v1/batch to url and returns the results.
func postBatch(t *testing.T, url string, ops []wire.BatchOp) []wire.BatchResult {
	t.Helper()
	body, _ := json.Marshal(wire.BatchRequest{Ops: ops})
	resp, err := http.Post(url+"/v1/batch", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("POST /v1/batch: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out wire.BatchResponse
	if err := json.Unmarshal(raw, &out); resp.StatusCode != 200 || err != nil || len(out.Results) != len(ops) {
		t.Fatalf("POST /v1/batch: %d %s (%v), want %d results", resp.StatusCode, raw, err, len(ops))
	}
	return out.Results
}

func grantOp(name, holder string) wire.BatchOp {
	l := int64(30)
	return wire.BatchOp{Op: "grant", Name: name, Holder: holder, LeaseS: &l}
}

// metricValue reads an unlabelled counter from a node's /metrics.
func metricValue(t *testing.T, url, name string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

// Issue 16 item 3, SPEC §4.1: a batch through a follower is forwarded op
// by op to the leader, which stamps and commits each as its single
// endpoint would; a coalescing client's concurrent calls through the
// follower get their own grants, conflicts and releases. When the leader
// is cut off with a batch in flight, every op of it answers 503 (outcome
// unknown, or not the leader), never a success it cannot know.
func TestClusterBatch(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, "n1", "n2", "n3")
	meshNet, _ := withFaults(tc)
	first := tc.start("n1", "", 3)
	tc.start("n2", first.gossipAddr(), 3)
	tc.start("n3", first.gossipAddr(), 3)
	leader := tc.leader()
	lc := tc.nodes[leader]
	fc := tc.others(leader)[0]
	waitFor(t, "the follower knows the leader", 10*time.Second, func() bool {
		_, ok := fc.n.mode.route()
		return ok
	})

	// Mixed results through the follower, in order.
	if _, err := lc.tn.c.Grant(bg, "taken", "someone", 30); err != nil {
		t.Fatal(err)
	}
	res := postBatch(t, fc.tn.url, []wire.BatchOp{grantOp("fresh", "me"), grantOp("taken", "me"), {Op: "grant", Name: "bad/name", Holder: "me"}})
	var g wire.Grant
	var held, bad wire.ErrorBody
	_ = json.Unmarshal(res[0].Body, &g)
	_ = json.Unmarshal(res[1].Body, &held)
	_ = json.Unmarshal(res[2].Body, &bad)
	wantValid := uint64(lc.an.clk.Now().UnixMilli()) + 30_000 // the leader's (manual) clock stamped it
	if res[0].Status != 200 || g.Holder != "me" || g.Token == 0 || g.ConservativeValidBeforeUnixMs != wantValid || g.RemainingMs != 30_000 {
		t.Fatalf("grant through a follower's batch: %d %s (want valid before %d)", res[0].Status, res[0].Body, wantValid)
	}
	if res[1].Status != 409 || held.Error != "held" || held.Holder != "someone" {
		t.Fatalf("held grant in the batch: %d %s", res[1].Status, res[1].Body)
	}
	if res[2].Status != 400 || bad.Error != "bad_request" {
		t.Fatalf("bad op in the batch: %d %s", res[2].Status, res[2].Body)
	}
	if got, err := lc.tn.c.Get(bg, "fresh"); err != nil || got.Token != g.Token {
		t.Fatalf("the leader reads %+v %v, want token %d", got, err, g.Token)
	}

	// A coalescing client through the follower: concurrent calls.
	cc, err := client.New(fc.tn.url, client.WithCoalescing(2))
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			name, holder := fmt.Sprintf("co-%d", i), fmt.Sprintf("w-%d", i)
			l, err := cc.TryGrant(bg, name, holder, 30)
			if err != nil {
				errs[i] = err
				return
			}
			if _, err := cc.TryGrant(bg, name, "intruder", 30); !errors.Is(err, client.ErrHeld) {
				errs[i] = fmt.Errorf("second holder: %v, want held", err)
				return
			}
			if _, err := cc.Release(bg, name, holder, l.Token+1000); !errors.Is(err, client.ErrWrongToken) {
				errs[i] = fmt.Errorf("release with another token: %v, want wrong_token", err)
				return
			}
			if _, err := cc.Release(bg, name, holder, l.Token); err != nil {
				errs[i] = fmt.Errorf("release: %v", err)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if v := metricValue(t, fc.tn.url, "ticket_batch_ops_total"); v == "" || v == "0" || v == "3" {
		t.Fatalf("the follower's ticket_batch_ops_total is %q: the coalescing client did not batch", v)
	}

	// The leader is cut off with a batch in flight: each op's outcome is
	// unknown, or it was refused before the log — not the leader, or (a
	// loaded machine: the leader noticed first) not ready, having lost
	// leadership.
	var ops []wire.BatchOp
	for i := range 8 {
		ops = append(ops, grantOp(fmt.Sprintf("lost-%d", i), "me"))
	}
	meshNet.Isolate(leader)
	for i, r := range postBatch(t, lc.tn.url, ops) {
		var e wire.ErrorBody
		_ = json.Unmarshal(r.Body, &e)
		if r.Status != 503 || (e.Reason != "unknown_outcome" && e.Error != "not_leader" && e.Reason != "lost leadership") {
			t.Errorf("op %d on the cut-off leader: %d %s, want 503 unknown_outcome, not_leader or lost leadership", i, r.Status, r.Body)
		}
	}
	meshNet.HealAll()
}
