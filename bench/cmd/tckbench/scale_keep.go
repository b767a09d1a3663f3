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
// lease), oldest first, so a fill that takes longer than a lease still
// ends with every ticket active. Keeping n tickets alive takes n / lease
// renewals a second (5M at 250 s: 20,000/s) beside the fill, with as many
// batches in flight as the fill has clients. A renewal the cluster could
// not serve (a failed request, a 5xx: a leadership change) is tried again
// until the ticket's lease ends; a ticket is lost (counted in failed, the
// section's note says so) when its lease ended first or the cluster
// refused the renewal (a 4xx).
type keeper struct {
	batch   int
	renewAt time.Duration
	leaseS  int
	tokens  []atomic.Uint64 // 0: not settled yet; notGranted: the fill gave up on it
	due     []atomic.Int64  // unix ns when its renewal is due
	ends    []atomic.Int64  // unix ns when its lease ends (counted from the request's send)
	mu      sync.Mutex
	retry   []retryItem // renewals to try again, oldest first
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
		tokens: make([]atomic.Uint64, n), due: make([]atomic.Int64, n), ends: make([]atomic.Int64, n)}
}

// granted records fill ticket i's token (0 when it was not granted),
// sent at sent: its lease runs from the leader's receipt, after sent.
func (k *keeper) granted(i int64, token uint64, sent time.Time) {
	if token == 0 {
		k.tokens[i].Store(notGranted)
		return
	}
	k.due[i].Store(sent.Add(k.renewAt).UnixNano())
	k.ends[i].Store(sent.Add(time.Duration(k.leaseS) * time.Second).UnixNano())
	k.tokens[i].Store(token)
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
	n := len(k.tokens)
	c := 0 // the next ticket in line: grants and renewals both go in index order
	timer := time.NewTimer(0)
	defer timer.Stop()
	for ctx.Err() == nil {
		ids := k.retries(k.batch)
		wait := 50 * time.Millisecond // nothing granted yet at the cursor
		for len(ids) < k.batch {
			tok := k.tokens[c].Load()
			if tok == notGranted {
				c = (c + 1) % n
				continue
			}
			if tok == 0 {
				break
			}
			if d := time.Until(time.Unix(0, k.due[c].Load())); d > 0 {
				wait = min(d, 50*time.Millisecond) // it may be in flight still
				break
			}
			k.due[c].Store(time.Now().Add(time.Hour).UnixNano()) // in flight
			ids = append(ids, c)
			c = (c + 1) % n
		}
		if len(ids) > 0 {
			select {
			case work <- ids:
			case <-ctx.Done():
			}
			continue
		}
		timer.Reset(wait) // until the next renewal falls due
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
			k.due[i].Store(sent.Add(k.renewAt).UnixNano())
			k.ends[i].Store(sent.Add(time.Duration(k.leaseS) * time.Second).UnixNano())
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
