package ticket

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/btree"
)

// Ticket is one held ticket. (The small fields sit together at the end:
// 64 bytes, not 72, for each of millions of tickets.)
type Ticket struct {
	Name   string
	Holder string
	Token  uint64 // TokenFor(epoch, Raft index of the Grant entry)
	// ValidBeforeMs is conservative_valid_before_unix_ms: the proposer's
	// receive time (rounded down) + lease_s×1000, never + Δ.
	ValidBeforeMs uint64
	// ExpiryMs is server_expiry_unix_ms: now (rounded up) + lease_s×1000 + Δ,
	// absolute, never recomputed.
	ExpiryMs uint64
	LeaseS   uint8
	// Revoked: an administrator revoked it (SPEC §4). The holder can no
	// longer Renew; it frees at ExpiryMs (Expire) or by its holder's
	// Release, never earlier.
	Revoked bool
	// Waiters is not state: the blocking grants (SPEC §4.2) queued for it
	// on the leader when it was listed (List answers fill it); never in
	// an entry or a snapshot, always 0 from the FSM.
	Waiters uint32
}

// Code is the outcome of applying one entry.
type Code uint8

// Outcomes. CodeFatal means the FSM stopped (Result.Err says why).
const (
	CodeOK          Code = iota // applied: granted, renewed, released, expired, Δ recorded
	CodeExisting                // Grant by the current holder of an unexpired ticket: unchanged
	CodeHeld                    // Grant of a ticket another holder holds unexpired
	CodeNotHeld                 // Renew/Release of a ticket nobody holds
	CodeWrongHolder             // Renew/Release by someone other than the holder
	CodeWrongToken              // Renew/Release with a token other than the current one
	CodeLeaseOver               // Renew whose now is at or after the current expiry
	CodeNoop                    // Expire that did not apply (gone, other token, or not yet due)
	CodeNoDelta                 // Grant/Renew before Δ was recorded
	CodeBadExpiry               // entry expiry ≠ now + lease_s×1000 + the replicated Δ
	CodeFatal
	CodeRevoked    // Renew, or the holder's own Grant, of a revoked ticket
	CodeTokenSpace // Grant at a Raft index above MaxTokenIndex: the epoch is full
)

var codeNames = [...]string{"ok", "existing", "held", "not_held", "wrong_holder", "wrong_token", "lease_over", "noop", "no_delta", "bad_expiry", "fatal", "revoked", "token_space"}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Result is what Apply returns to the proposer. Ticket is the ticket after
// the entry (OK, Existing) or the current one (Held, WrongHolder, ...).
type Result struct {
	Code   Code
	Ticket Ticket
	Err    error // set with CodeFatal
	// Items are a KeepAlive's results (Code OK), one per item in order:
	// each what a Renew entry of that item would have returned.
	Items []Result
}

// Errors that stop the node. They wrap through *ApplyError and *RestoreError.
var (
	// ErrDeltaMismatch: the replicated Δ differs from this node's configured Δ.
	ErrDeltaMismatch = errors.New("Δ differs from this node's configured Δ")
	// ErrDeltaRange: a Δ outside 2..=60000.
	ErrDeltaRange = errors.New("Δ outside 2..=60000")
	// ErrOrder: a log index that does not increase.
	ErrOrder = errors.New("log index does not increase")
	// ErrStopped: the FSM already stopped on an earlier error.
	ErrStopped = errors.New("state machine stopped on an earlier error")
)

// ApplyError is a fatal failure applying the log entry at Index.
type ApplyError struct {
	Index uint64
	Err   error
}

func (e *ApplyError) Error() string {
	return fmt.Sprintf("ticket: log entry at index %d: %v", e.Index, e.Err)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// item is one held ticket, in the FSM's map, tree and heap. While a
// snapshot is pinned (taken, not yet released) its clone of the tree may
// be reading any item made before it: a change then puts a changed copy
// in the item's place (writable) instead of changing it. hidx, which no
// snapshot reads, moves in place.
type item struct {
	Ticket
	mod  uint64 // modify index: the entry that last changed it (in memory only)
	hidx int    // position in FSM.heap
}

func byName(a, b *item) bool { return a.Name < b.Name }

// treeDegree is the tickets tree's B-tree degree: nodes of 31 to 63
// items (pointers), a few levels for millions of tickets.
const treeDegree = 32

func newTree() *btree.BTreeG[*item] { return btree.NewG(treeDegree, byName) }

// maxHolders bounds the holder strings the FSM interns.
const maxHolders = 1 << 12

// FSM is the ticket state machine. Build it with New.
//
// The tickets are held three ways: a map by name for lookups; a
// copy-on-write B-tree (google/btree) ordered by name, which a snapshot
// clones in O(1) under the lock and writes, in name order, while the FSM
// goes on applying (only the tree nodes changed after the clone are
// copied, and the items changed while the snapshot is pinned); a min-heap
// by expiry for the leader's expiry loop.
type FSM struct {
	mu       sync.RWMutex
	expect   uint64 // this node's configured Δ
	delta    uint64 // replicated Δ; 0 until the Init entry
	index    uint64 // last applied command index
	epoch    uint64 // token epoch (token.go)
	maxToken uint64 // highest token issued (HighestToken)
	byName   map[string]*item
	tickets  *btree.BTreeG[*item] // the same items in name order
	pinned   int                  // snapshots taken and not yet released
	heap     []*item              // min-heap on ExpiryMs, for the leader's expiry loop
	retired  map[string]bool      // NodeIds retired by OpRetire (SPEC §3.4)
	// holders interns holder strings: one client holds many tickets, and
	// every entry decodes its own copy. Cleared when it reaches maxHolders.
	holders map[string]string
	// freed is the index of the last Release or Expire that applied (any
	// name): the modify index reported for a ticket nobody holds.
	freed    uint64
	onChange func(name string)
	fates    fates // the results of recent entries (fate.go): not state

	fatal   error
	fatalCh chan struct{}
}

// New returns an empty FSM for a node configured with Δ = deltaMs.
func New(deltaMs uint64) *FSM {
	return &FSM{expect: deltaMs, byName: map[string]*item{}, tickets: newTree(), retired: map[string]bool{}, holders: map[string]string{}, fatalCh: make(chan struct{})}
}

// lookup returns the item called name, or nil.
func (f *FSM) lookup(name string) *item { return f.byName[name] }

// writable returns the item to change for cur: cur itself when no
// snapshot is pinned, else a copy put in cur's place in the map, the tree
// and the heap (a pinned snapshot may be reading cur).
func (f *FSM) writable(cur *item) *item {
	if f.pinned == 0 {
		return cur
	}
	it := &item{Ticket: cur.Ticket, mod: cur.mod, hidx: cur.hidx}
	f.byName[it.Name] = it
	f.tickets.ReplaceOrInsert(it)
	f.heap[it.hidx] = it
	return it
}

// intern returns the FSM's copy of the holder string h.
func (f *FSM) intern(h string) string {
	if s, ok := f.holders[h]; ok {
		return s
	}
	if len(f.holders) >= maxHolders {
		clear(f.holders)
	}
	f.holders[h] = h
	return h
}

// Fatal returns the error that stopped the FSM, or nil.
func (f *FSM) Fatal() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.fatal
}

// Stopped is closed when the FSM stops on a fatal error.
func (f *FSM) Stopped() <-chan struct{} { return f.fatalCh }

// fail latches err; the caller holds f.mu.
func (f *FSM) fail(err error) Result {
	if f.fatal == nil {
		f.fatal = err
		close(f.fatalCh)
	}
	return Result{Code: CodeFatal, Err: f.fatal}
}

// Apply decodes and applies the log entry at Raft index. A decoding error,
// an unknown version, a bad checksum, a non-increasing index or a Δ other
// than the configured one stops the FSM for good (CodeFatal). Without the
// entry's term, FateOf forgets what it knew (ApplyTerm keeps it).
func (f *FSM) Apply(index uint64, data []byte) Result { return f.ApplyTerm(index, 0, data) }

// ApplyTerm is Apply for the entry at Raft index and term: FateOf then
// knows its result (fate.go).
func (f *FSM) ApplyTerm(index, term uint64, data []byte) Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fatal != nil {
		return Result{Code: CodeFatal, Err: f.fatal}
	}
	e, err := DecodeEntry(data)
	if err != nil {
		return f.fail(&ApplyError{Index: index, Err: err})
	}
	if index <= f.index {
		return f.fail(&ApplyError{Index: index, Err: fmt.Errorf("%w: previous %d", ErrOrder, f.index)})
	}
	f.index = index
	res := f.apply(index, &e)
	f.fates.record(index, term, res)
	return res
}

func (f *FSM) apply(index uint64, e *Entry) Result {
	if e.Op == OpInit {
		if e.DeltaMs != f.expect || f.delta != 0 && f.delta != e.DeltaMs {
			return f.fail(&ApplyError{Index: index, Err: fmt.Errorf("%w: the cluster's Δ is %d ms, this node is configured with %d ms (changing Δ means a new cluster)", ErrDeltaMismatch, e.DeltaMs, f.expect)})
		}
		f.delta = e.DeltaMs
		return Result{Code: CodeOK}
	}
	if e.Op == OpRetire {
		if f.retired[e.NodeID] {
			return Result{Code: CodeExisting}
		}
		f.retired[e.NodeID] = true
		return Result{Code: CodeOK}
	}
	cur := f.lookup(e.Name)
	switch e.Op {
	case OpGrant:
		if r, ok := f.checkExpiry(e.NowMs, e.LeaseS, e.ExpiryMs); !ok {
			return r
		}
		if cur != nil && cur.ExpiryMs > e.NowMs {
			switch {
			case cur.Holder != e.Holder:
				return Result{Code: CodeHeld, Ticket: cur.Ticket}
			case cur.Revoked:
				return Result{Code: CodeRevoked, Ticket: cur.Ticket}
			}
			return Result{Code: CodeExisting, Ticket: cur.Ticket}
		}
		if index > MaxTokenIndex {
			return Result{Code: CodeTokenSpace}
		}
		t := Ticket{
			Name: e.Name, Holder: f.intern(e.Holder), Token: TokenFor(f.epoch, index), LeaseS: e.LeaseS,
			ValidBeforeMs: e.RecvMs + uint64(e.LeaseS)*1000, ExpiryMs: e.ExpiryMs,
		}
		f.maxToken = t.Token
		if cur != nil {
			cur = f.writable(cur)
			cur.Ticket, cur.mod = t, index
			f.fix(cur.hidx)
		} else {
			it := &item{Ticket: t, mod: index}
			f.byName[e.Name] = it
			f.tickets.ReplaceOrInsert(it)
			f.push(it)
		}
		f.changed(e.Name)
		return Result{Code: CodeOK, Ticket: t}
	case OpRenew:
		return f.renew(index, e.NowMs, e.RecvMs, cur, &RenewItem{Name: e.Name, Holder: e.Holder, Token: e.Token, LeaseS: e.LeaseS, ExpiryMs: e.ExpiryMs})
	case OpKeepAlive:
		// Each item as a Renew entry of its own with the entry's now,
		// one after another: a later item sees what an earlier one did.
		items := make([]Result, len(e.Items))
		for i := range e.Items {
			it := &e.Items[i]
			items[i] = f.renew(index, e.NowMs, e.RecvMs, f.lookup(it.Name), it)
		}
		return Result{Code: CodeOK, Items: items}
	case OpRelease:
		if r, ok := f.checkHolder(cur, e.Holder, e.Token); !ok {
			return r
		}
		f.remove(cur)
		f.freed = index
		f.changed(e.Name)
		return Result{Code: CodeOK, Ticket: cur.Ticket}
	case OpExpire:
		if cur == nil || cur.Token != e.Token || e.NowMs < cur.ExpiryMs {
			r := Result{Code: CodeNoop}
			if cur != nil {
				r.Ticket = cur.Ticket
			}
			return r
		}
		f.remove(cur)
		f.freed = index
		f.changed(e.Name)
		return Result{Code: CodeOK, Ticket: cur.Ticket}
	case OpRevoke:
		// A ticket whose expiry has passed by the entry's now is free (a
		// Grant would take it): nothing to revoke.
		if cur == nil || cur.ExpiryMs <= e.NowMs {
			return Result{Code: CodeNotHeld}
		}
		if e.Token != 0 && e.Token != cur.Token {
			return Result{Code: CodeWrongToken, Ticket: cur.Ticket}
		}
		if cur.Revoked {
			return Result{Code: CodeExisting, Ticket: cur.Ticket}
		}
		cur = f.writable(cur)
		cur.Revoked, cur.mod = true, index
		f.changed(e.Name)
		return Result{Code: CodeOK, Ticket: cur.Ticket}
	}
	// Unreachable: DecodeEntry accepts only the ops above.
	return f.fail(&ApplyError{Index: index, Err: fmt.Errorf("%w: op %d", ErrFormat, e.Op)})
}

// renew applies one renewal (a Renew entry, or an item of a KeepAlive)
// at index with the entry's now and receive time; cur is the ticket
// called it.Name, or nil.
func (f *FSM) renew(index, nowMs, recvMs uint64, cur *item, it *RenewItem) Result {
	if r, ok := f.checkHolder(cur, it.Holder, it.Token); !ok {
		return r
	}
	if cur.Revoked {
		return Result{Code: CodeRevoked, Ticket: cur.Ticket}
	}
	if nowMs >= cur.ExpiryMs {
		return Result{Code: CodeLeaseOver, Ticket: cur.Ticket}
	}
	if r, ok := f.checkExpiry(nowMs, it.LeaseS, it.ExpiryMs); !ok {
		return r
	}
	cur = f.writable(cur)
	cur.LeaseS = it.LeaseS
	cur.ValidBeforeMs = recvMs + uint64(it.LeaseS)*1000
	cur.ExpiryMs = it.ExpiryMs
	cur.mod = index
	f.fix(cur.hidx)
	f.changed(it.Name)
	return Result{Code: CodeOK, Ticket: cur.Ticket}
}

func (f *FSM) checkExpiry(nowMs uint64, leaseS uint8, expiryMs uint64) (Result, bool) {
	if f.delta == 0 {
		return Result{Code: CodeNoDelta}, false
	}
	if want, ok := ExpiryFor(nowMs, leaseS, f.delta); !ok || want != expiryMs {
		return Result{Code: CodeBadExpiry}, false
	}
	return Result{}, true
}

func (f *FSM) checkHolder(cur *item, holder string, token uint64) (Result, bool) {
	switch {
	case cur == nil:
		return Result{Code: CodeNotHeld}, false
	case cur.Holder != holder:
		return Result{Code: CodeWrongHolder, Ticket: cur.Ticket}, false
	case cur.Token != token:
		return Result{Code: CodeWrongToken, Ticket: cur.Ticket}, false
	}
	return Result{}, true
}

// Delta returns the replicated Δ (0 before the Init entry).
func (f *FSM) Delta() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.delta
}

// IsRetired reports whether id was retired (an applied OpRetire).
func (f *FSM) IsRetired(id string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.retired[id]
}

// Retired returns the retired NodeIds, sorted.
func (f *FSM) Retired() []string {
	f.mu.RLock()
	out := make([]string, 0, len(f.retired))
	for id := range f.retired {
		out = append(out, id)
	}
	f.mu.RUnlock()
	slices.Sort(out)
	return out
}

// ConfiguredDelta returns the Δ this FSM was built for.
func (f *FSM) ConfiguredDelta() uint64 { return f.expect }

// Index returns the last applied command index.
func (f *FSM) Index() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.index
}

// Len returns the number of held tickets.
func (f *FSM) Len() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.byName)
}

// Get returns the ticket called name.
func (f *FSM) Get(name string) (Ticket, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if it := f.lookup(name); it != nil {
		return it.Ticket, true
	}
	return Ticket{}, false
}

// OnChange sets fn to be called, under the FSM's lock, after every entry
// that changes a ticket (granted, renewed, released, expired, revoked) with its
// name, and with "" after a Restore (every ticket may have changed). fn
// must not block and must not call back into the FSM. Set it before Raft
// starts.
func (f *FSM) OnChange(fn func(name string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onChange = fn
}

func (f *FSM) changed(name string) {
	if f.onChange != nil {
		f.onChange(name)
	}
}

// GetIndexed returns the ticket called name and its modify index: the
// index of the entry that last changed it, or for a ticket nobody holds
// the index of the last Release or Expire of any ticket. After a Restore
// every index is the snapshot's, so a reported index is never below the
// true one and never above the applied index: a watcher waiting for an
// index above N may wake for nothing, never miss a change.
func (f *FSM) GetIndexed(name string) (Ticket, bool, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if it := f.lookup(name); it != nil {
		return it.Ticket, true, it.mod
	}
	return Ticket{}, false, f.freed
}

// RefusesGrant reports whether a Grant by holder at nowMs would be refused
// as held by the current state (another holder, expiry > nowMs), with the
// refusal the FSM would return. A leader may answer it without appending
// an entry: a refusal never creates a holder (SPEC §4 Grant;
// TestRefusedGrantAppendsNothing).
func (f *FSM) RefusesGrant(name, holder string, nowMs uint64) (Result, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if it := f.lookup(name); it != nil && it.ExpiryMs > nowMs && it.Holder != holder {
		return Result{Code: CodeHeld, Ticket: it.Ticket}, true
	}
	return Result{}, false
}

// List returns up to limit tickets whose names start with prefix, sorted by
// name, and whether more matched (limit ≤ 0: no limit).
func (f *FSM) List(prefix string, limit int) ([]Ticket, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []Ticket
	more := false
	f.tickets.AscendGreaterOrEqual(&item{Ticket: Ticket{Name: prefix}}, func(it *item) bool {
		switch {
		case !strings.HasPrefix(it.Name, prefix):
			return false
		case limit > 0 && len(out) == limit:
			more = true
			return false
		}
		out = append(out, it.Ticket)
		return true
	})
	return out, more
}

// Due is a ticket whose server-side expiry has passed.
type Due struct {
	Name  string
	Token uint64
}

// Due returns up to max tickets with ExpiryMs ≤ nowMs (the leader's wall
// time rounded down), earliest first in heap order.
func (f *FSM) Due(nowMs uint64, max int) []Due {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []Due
	stack := []int{0}
	for len(stack) > 0 && len(out) < max {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(f.heap) || f.heap[i].ExpiryMs > nowMs {
			continue // children of a later node are later still
		}
		out = append(out, Due{Name: f.heap[i].Name, Token: f.heap[i].Token})
		stack = append(stack, 2*i+2, 2*i+1)
	}
	return out
}

// NextExpiry returns the earliest server-side expiry, if any ticket is held.
func (f *FSM) NextExpiry() (uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if len(f.heap) == 0 {
		return 0, false
	}
	return f.heap[0].ExpiryMs, true
}

// heap maintenance (an indexed binary min-heap on ExpiryMs).

func (f *FSM) push(it *item) {
	it.hidx = len(f.heap)
	f.heap = append(f.heap, it)
	f.up(it.hidx)
}

func (f *FSM) remove(it *item) {
	delete(f.byName, it.Name)
	f.tickets.Delete(it)
	i, last := it.hidx, len(f.heap)-1
	if i != last {
		f.swap(i, last)
	}
	f.heap[last] = nil
	f.heap = f.heap[:last]
	if i != last {
		f.fix(i)
	}
	it.hidx = -1
}

func (f *FSM) fix(i int) {
	if !f.down(i) {
		f.up(i)
	}
}

func (f *FSM) swap(i, j int) {
	f.heap[i], f.heap[j] = f.heap[j], f.heap[i]
	f.heap[i].hidx = i
	f.heap[j].hidx = j
}

func (f *FSM) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if f.heap[p].ExpiryMs <= f.heap[i].ExpiryMs {
			return
		}
		f.swap(i, p)
		i = p
	}
}

func (f *FSM) down(i int) bool {
	start, n := i, len(f.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && f.heap[r].ExpiryMs < f.heap[l].ExpiryMs {
			m = r
		}
		if f.heap[m].ExpiryMs >= f.heap[i].ExpiryMs {
			break
		}
		f.swap(i, m)
		i = m
	}
	return i > start
}
