package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// keeper keeps the scale fill's tickets alive: from the fill's start
// until the last measurement it renews, through POST /v1/batch, every
// ticket whose last grant or renewal is renewAt old (two thirds of its
// lease), the earliest due first, so a fill that takes longer than a
// lease still ends with every ticket active. Keeping n tickets alive
// takes n / lease renewals a second (5M at 250 s: 20,000/s) beside the
// fill, with as many batches in flight as the fill has clients. A renewal
// the cluster could not serve (a failed request, a 5xx: a leadership
// change) is tried again until the ticket's lease ends; a ticket is lost
// (counted in failed, the section's note says so) when its lease ended
// first or the cluster refused the renewal (a 4xx).
//
// The renewals due are kept by the second they fall due (a timing wheel):
// a ticket renewed early in a long fill falls due again while the fill
// still grants, so the renewals cannot follow the fill's order (a cursor
// in ticket order renewed each ticket once, then waited at the fill's
// front while the first tickets' leases ran out).
type keeper struct {
	batch   int
	renewAt time.Duration
	leaseS  int
	tokens  []atomic.Uint64 // 0: not settled yet; notGranted: the fill gave up on it
	ends    []atomic.Int64  // unix ns when its lease ends (counted from the request's send)
	mu      sync.Mutex
	wheel   map[int64][]int32 // unix second → the tickets whose renewal falls due in it
	next    int64             // the first second not yet taken from the wheel (0: none yet)
	retry   []retryItem       // renewals to try again, oldest first
	renewed atomic.Int64
	failed  atomic.Int64
	first   atomic.Pointer[string]
}

const notGranted = ^uint64(0)

// retryItem is a renewal to try again from at on.
type retryItem struct {
	id int
	at time.Time
}

// retryAfter is how long a renewal the cluster could not serve waits
// before it is tried again.
const retryAfter = 200 * time.Millisecond

func newKeeper(n, batch, leaseS int) *keeper {
	return &keeper{batch: batch, leaseS: leaseS, renewAt: time.Duration(leaseS) * time.Second * 2 / 3,
		tokens: make([]atomic.Uint64, n), ends: make([]atomic.Int64, n), wheel: map[int64][]int32{}}
}

// granted records fill ticket i's token (0 when it was not granted),
// sent at sent: its lease runs from the leader's receipt, after sent.
func (k *keeper) granted(i int64, token uint64, sent time.Time) {
	if token == 0 {
		k.tokens[i].Store(notGranted)
		return
	}
	k.tokens[i].Store(token)
	k.schedule(int(i), sent)
}

// schedule notes that ticket i was granted or renewed by a request sent
// at sent: its lease ends a lease after, its renewal falls due renewAt
// after.
func (k *keeper) schedule(i int, sent time.Time) {
	k.ends[i].Store(sent.Add(time.Duration(k.leaseS) * time.Second).UnixNano())
	sec := sent.Add(k.renewAt).Unix()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.next != 0 && sec < k.next {
		sec = k.next // already passed: the next turn takes it
	}
	k.wheel[sec] = append(k.wheel[sec], int32(i))
}

// dueNow takes up to max renewals due by now from the wheel, earliest
// first (a second only partly taken keeps the rest).
func (k *keeper) dueNow(max int) []int {
	now := time.Now().Unix()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.next == 0 {
		k.next = now - int64(k.renewAt/time.Second) // nothing was scheduled before the keeper's start
		for sec := range k.wheel {
			k.next = min(k.next, sec)
		}
	}
	var ids []int
	for ; k.next <= now && len(ids) < max; k.next++ {
		b := k.wheel[k.next]
		take := min(len(b), max-len(ids))
		for _, id := range b[:take] {
			ids = append(ids, int(id))
		}
		if take < len(b) {
			k.wheel[k.next] = b[take:]
			break
		}
		delete(k.wheel, k.next)
	}
	return ids
}

// alive counts the tickets whose lease, as the keeper counts it (from
// the send of its last grant or renewal: earlier than the leader's), has
// not ended at now: the tickets the keeper holds. A node's
// tickets_active also counts tickets past their expiry that its expiry
// loop has not freed yet.
func (k *keeper) alive(now time.Time) int {
	n := 0
	for i := range k.ends {
		if t := k.tokens[i].Load(); t != 0 && t != notGranted && k.ends[i].Load() > now.UnixNano() {
			n++
		}
	}
	return n
}

// retries takes up to max renewals due to be tried again; those whose
// lease ended meanwhile are lost.
func (k *keeper) retries(max int) []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	var ids []int
	now := time.Now()
	j := 0
	for ; j < len(k.retry) && len(ids) < max && !now.Before(k.retry[j].at); j++ {
		id := k.retry[j].id
		if now.UnixNano() >= k.ends[id].Load() {
			k.giveUp([]int{id}, fmt.Sprintf("renew %s: its lease ended before a renewal got through", fillName(int64(id))))
			continue
		}
		ids = append(ids, id)
	}
	k.retry = k.retry[j:]
	return ids
}

func (k *keeper) again(ids []int) {
	at := time.Now().Add(retryAfter)
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range ids {
		k.retry = append(k.retry, retryItem{id, at})
	}
}

func (k *keeper) fail(msg string) {
	if k.failed.Add(1) == 1 {
		k.first.Store(&msg)
	}
}

// run renews until ctx ends, with workers concurrent batches sent to
// the node target() names; a failed request moves target on (moveOn).
func (k *keeper) run(ctx context.Context, hc *http.Client, addrs []string, target func() int, moveOn func(int), workers int) {
	work := make(chan []int, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ids := range work {
				k.renewBatch(ctx, hc, addrs, target, moveOn, ids)
			}
		}()
	}
	defer wg.Wait()
	defer close(work)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for ctx.Err() == nil {
		ids := k.retries(k.batch)
		if len(ids) < k.batch {
			ids = append(ids, k.dueNow(k.batch-len(ids))...)
		}
		if len(ids) > 0 {
			select {
			case work <- ids:
			case <-ctx.Done():
			}
			continue
		}
		timer.Reset(50 * time.Millisecond) // until the next renewal falls due
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
	}
}

// renewBatch renews fill tickets ids in one POST /v1/batch; what the
// cluster could not serve (the whole request failed, or 5xx ops: a
// leadership change) moves target on and is tried again (again).
func (k *keeper) renewBatch(ctx context.Context, hc *http.Client, addrs []string, target func() int, moveOn func(int), ids []int) {
	type op struct {
		Op     string `json:"op"`
		Name   string `json:"name"`
		Holder string `json:"holder"`
		Token  uint64 `json:"token"`
		LeaseS int    `json:"lease_s"`
	}
	var body struct {
		Ops []op `json:"ops"`
	}
	for _, i := range ids {
		body.Ops = append(body.Ops, op{"renew", fillName(int64(i)), "filler", k.tokens[i].Load(), k.leaseS})
	}
	b, err := json.Marshal(body)
	if err != nil {
		k.giveUp(ids, err.Error())
		return
	}
	at := target()
	sent := time.Now()
	res, err := postBatchResults(ctx, hc, addrs[at], b, len(ids))
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		moveOn(at)
		k.again(ids)
		return
	}
	var again []int
	for j, i := range ids {
		switch st := res[j].Status; {
		case st == http.StatusOK:
			k.schedule(i, sent)
			k.renewed.Add(1)
		case st >= 500:
			again = append(again, i)
		default:
			k.giveUp([]int{i}, fmt.Sprintf("renew %s: status %d %s", fillName(int64(i)), st, res[j].Body))
		}
	}
	if len(again) > 0 {
		moveOn(at)
		k.again(again)
	}
}

// giveUp counts tickets ids as lost: the cursor never waits for them.
func (k *keeper) giveUp(ids []int, why string) {
	for _, i := range ids {
		k.tokens[i].Store(notGranted)
		k.fail(why)
	}
}

// batchResult is one op's answer in a POST /v1/batch response.
type batchResult struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

// postBatchResults sends one POST /v1/batch of ops ops and returns their
// results; an error when the request failed as a whole.
func postBatchResults(ctx context.Context, hc *http.Client, url string, body []byte, ops int) ([]batchResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/batch", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var ans struct {
		Results []batchResult `json:"results"`
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST %s/v1/batch: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return nil, fmt.Errorf("POST %s/v1/batch: %w", url, err)
	}
	if len(ans.Results) != ops {
		return nil, fmt.Errorf("POST %s/v1/batch: %d results for %d ops", url, len(ans.Results), ops)
	}
	return ans.Results, nil
}

func fillName(i int64) string { return fmt.Sprintf("fill-%08d", i) }
