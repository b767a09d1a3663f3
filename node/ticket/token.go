package ticket

import "fmt"

// A fencing token is epoch<<TokenIndexBits | index (SPEC §4, §3.4): the
// Raft index of its Grant entry in the low 48 bits, the cluster's token
// epoch in the high 16. A cluster starts in epoch 0, where the token is
// the Raft index itself. `ticketd restore` (a cluster rebuilt from a
// backup) moves to the next epoch, so every token it issues is above every
// token the old cluster can issue in its own epoch — also after the
// backup, while the old cluster still runs — whatever the two clusters'
// Raft indexes.
//
// Limits: an epoch has room for 2^48 − 1 Raft indexes (2.8×10^14: 89
// years at 100,000 entries per second); a Grant whose entry lands above
// that is refused (CodeTokenSpace), so a cluster never issues a token that
// reaches into the next epoch. Renew, Release, Revoke and Expire go on;
// a backup restored into the next epoch makes room again. Epochs run to
// MaxTokenEpoch (65,535 restores in a cluster's line); a restore past it
// is refused. Tokens are exact JSON integers for clients that read them
// as float64 (JavaScript) up to 2^53, that is through epoch 31.
const (
	TokenIndexBits = 48
	// MaxTokenIndex is the highest Raft index a Grant may have.
	MaxTokenIndex = 1<<TokenIndexBits - 1
	// MaxTokenEpoch is the last token epoch.
	MaxTokenEpoch = 1<<(64-TokenIndexBits) - 1
)

// TokenFor is the token of a Grant at Raft index in epoch (index ≤
// MaxTokenIndex, epoch ≤ MaxTokenEpoch).
func TokenFor(epoch, index uint64) uint64 { return epoch<<TokenIndexBits | index }

// TokenEpoch is the epoch a token was issued in.
func TokenEpoch(token uint64) uint64 { return token >> TokenIndexBits }

// TokenIndex is the Raft index (within its epoch) of a token's Grant.
func TokenIndex(token uint64) uint64 { return token & MaxTokenIndex }

// tokenBound is the highest token a state at command index in epoch can
// hold: no Grant after index, none above MaxTokenIndex.
func tokenBound(epoch, index uint64) uint64 {
	return TokenFor(epoch, min(index, MaxTokenIndex))
}

// Epoch returns the state's token epoch.
func (f *FSM) Epoch() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.epoch
}

// HighestToken returns the highest fencing token issued up to the last
// applied entry. It is exact when the state was built from entries and
// snapshots of format 4; after a snapshot of an earlier format (which does
// not carry it) it is the bound every token issued up to that snapshot is
// below or at (its command index), until the next Grant.
func (f *FSM) HighestToken() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.maxToken
}

// NextEpoch moves an offline state into the next token epoch and returns
// it: every token granted from now on is above every token of the epochs
// before (a cluster restored from a backup, SPEC §3.4). It refuses after
// MaxTokenEpoch, and on a stopped FSM.
func (f *FSM) NextEpoch() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fatal != nil {
		return 0, fmt.Errorf("ticket: %w: %v", ErrStopped, f.fatal)
	}
	if f.epoch >= MaxTokenEpoch {
		return 0, fmt.Errorf("ticket: the token epoch is already %d, the last one (%d): no new epoch is left for a restore", f.epoch, MaxTokenEpoch)
	}
	f.epoch++
	return f.epoch, nil
}
