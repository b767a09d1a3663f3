package workload

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/safety"
)

// Target is one node the clients send requests to.
type Target struct {
	Name   string
	Client *client.Client
}

// Config is one workload.
type Config struct {
	Targets []Target
	// Clients is the number of concurrent clients (default 6).
	Clients int
	// Hot and Cold are how many hot and cold tickets (default 2 and 16);
	// three requests in four go to a hot one.
	Hot, Cold int
	// Prefix is put before every ticket name (keeps a check's tickets
	// apart from real ones).
	Prefix string
	// LeaseS is the lease asked for (default 1 s).
	LeaseS int
	// Seed seeds the clients' choices.
	Seed uint64
	// Clock is the history's clock and must be the clients' (default
	// time.Now).
	Clock func() time.Time
	// Offsets, if set, reports the injected clock offsets (ms, by node),
	// recorded on every op.
	Offsets func() map[string]int64
	// OpTimeout bounds one request (default 3 s).
	OpTimeout time.Duration
	// Revokes adds an administrator (one more client) who now and then
	// reads a hot ticket and revokes the grant it found (SPEC §4); the
	// targets' clients must carry the admin token.
	Revokes bool
	// Rotate, if set, moves the clients to a fresh set of tickets (the
	// names carry a round number) every Rotate of the history clock, so
	// each ticket's history stays small enough for porcupine in a long
	// run.
	Rotate time.Duration
}

// Register is the fencing register of one run: per ticket it accepts a
// write whose token is at least the highest it accepted, and rejects the
// rest.
type Register struct {
	mu  sync.Mutex
	max map[string]uint64
}

// NewRegister is an empty register.
func NewRegister() *Register { return &Register{max: map[string]uint64{}} }

// Write offers a write with token to ticket's register; false: rejected.
func (r *Register) Write(ticket string, token uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.max[ticket] {
		return false
	}
	r.max[ticket] = token
	return true
}

// Runner is one running workload.
type Runner struct {
	cfg   Config
	h     *safety.History
	reg   *Register
	epoch time.Time
}

// New prepares a workload recording into h.
func New(cfg Config, h *safety.History) (*Runner, error) {
	if len(cfg.Targets) == 0 {
		return nil, errors.New("workload: no targets")
	}
	cfg.Clients = cmp.Or(cfg.Clients, 6)
	cfg.Hot, cfg.Cold = cmp.Or(cfg.Hot, 2), cmp.Or(cfg.Cold, 16)
	cfg.LeaseS = cmp.Or(cfg.LeaseS, 1)
	if cfg.LeaseS < 1 || cfg.LeaseS > 250 {
		return nil, fmt.Errorf("workload: lease %d s is not 1..=250", cfg.LeaseS)
	}
	cfg.OpTimeout = cmp.Or(cfg.OpTimeout, 3*time.Second)
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Runner{cfg: cfg, h: h, reg: NewRegister(), epoch: cfg.Clock()}, nil
}

// Register is the run's fencing register (a scenario may write to it).
func (r *Runner) Register() *Register { return r.reg }

// Now is the history clock's reading (ns since the run's epoch).
func (r *Runner) Now() int64 { return int64(r.cfg.Clock().Sub(r.epoch)) }

// At converts a clock time to the history's ns.
func (r *Runner) At(t time.Time) int64 { return int64(t.Sub(r.epoch)) }

// Run runs the clients until ctx ends.
func (r *Runner) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range r.cfg.Clients {
		wg.Go(func() { r.client(ctx, i) })
	}
	if r.cfg.Revokes {
		wg.Go(func() { r.revoker(ctx, r.cfg.Clients) })
	}
	wg.Wait()
}

// revoker is the administrator: every 100–400 ms it reads a hot ticket and
// revokes the grant it found, by its token (a revoke is never repeated
// onto a later grant).
func (r *Runner) revoker(ctx context.Context, id int) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(id)))
	for Pause(ctx, time.Duration(100+rng.IntN(300))*time.Millisecond) {
		name := r.ticketName(rng)
		if !strings.Contains(name, "hot-") {
			continue
		}
		tok := r.get(ctx, id, r.target(rng), name)
		if tok == 0 || ctx.Err() != nil {
			continue
		}
		t := r.target(rng)
		op := r.begin(id, safety.Revoke, t, name, "")
		op.Token = tok
		octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
		tk, err := t.Client.Revoke(octx, name, tok)
		cancel()
		if err == nil {
			op.RespHolder, op.RespToken = tk.Holder, tk.Token
		}
		r.finish(op, err)
	}
}

func (r *Runner) ticketName(rng *rand.Rand) string {
	p := r.cfg.Prefix
	if r.cfg.Rotate > 0 {
		p += fmt.Sprintf("r%d-", r.Now()/int64(r.cfg.Rotate))
	}
	if rng.IntN(4) < 3 {
		return fmt.Sprintf("%shot-%d", p, rng.IntN(r.cfg.Hot))
	}
	return fmt.Sprintf("%scold-%d", p, rng.IntN(r.cfg.Cold))
}

func (r *Runner) target(rng *rand.Rand) Target { return r.cfg.Targets[rng.IntN(len(r.cfg.Targets))] }

func (r *Runner) offsets() map[string]int64 {
	if r.cfg.Offsets == nil {
		return nil
	}
	return r.cfg.Offsets()
}

// Pause waits d or until ctx ends (false: ctx ended). The clients' think
// time; fault schedules use it too.
func Pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (r *Runner) client(ctx context.Context, id int) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(id)))
	holder := fmt.Sprintf("client-%d", id)
	lease := time.Duration(r.cfg.LeaseS) * time.Second
	for ctx.Err() == nil {
		name := r.ticketName(rng)
		if rng.IntN(10) == 0 {
			r.get(ctx, id, r.target(rng), name)
		}
		l, ok := r.grant(ctx, id, r.target(rng), name, holder)
		if !ok {
			Pause(ctx, time.Duration(5+rng.IntN(40))*time.Millisecond)
			continue
		}
		token, deadline := l.Token, l.Deadline
		for range 1 + rng.IntN(4) {
			if !r.cfg.Clock().Before(deadline) {
				break
			}
			r.write(id, name, holder, token)
			if rng.IntN(3) == 0 {
				if rl, ok := r.renew(ctx, id, r.target(rng), name, holder, token); ok {
					deadline = rl.Deadline
				} else {
					break
				}
			}
			if rng.IntN(6) == 0 {
				r.get(ctx, id, r.target(rng), name)
			}
			if !Pause(ctx, time.Duration(rng.Int64N(int64(lease/4)))) {
				break
			}
		}
		if ctx.Err() != nil {
			return
		}
		if rng.IntN(5) < 3 {
			r.release(ctx, id, r.target(rng), name, holder, token)
		} // else: abandoned, it expires
	}
}

// classify maps a client error to an outcome and a code.
func classify(err error) (safety.Outcome, string) {
	var ce *client.Error
	if errors.Is(err, client.ErrOutcomeUnknown) {
		// The client sent it, lost the answer, and may have tried again
		// elsewhere (SPEC §4.1): whatever the last attempt said (a dial
		// error, a 503 with a stage), the first may have applied.
		code := "outcome_unknown"
		if errors.As(err, &ce) {
			code += "/" + ce.ErrorBody.Error + "/" + ce.Reason
		}
		return safety.Unknown, code
	}
	if errors.As(err, &ce) {
		if ce.StatusCode/100 == 4 {
			return safety.Refused, ce.ErrorBody.Error
		}
		// A 503 given before anything was proposed is a refusal; after a
		// proposal (raft, timeout, unknown_outcome, shutdown) it is not
		// known whether the entry commits.
		switch ce.Reason {
		case "unknown_outcome", "raft", "timeout", "shutdown", "snapshot":
			return safety.Unknown, ce.ErrorBody.Error + "/" + ce.Reason
		}
		// not_leader is not a refusal: node/consensus maps raft's
		// ErrLeadershipLost (the entry was appended and may still commit
		// under the next leader) to it, and a forwarded write may lose
		// its leader after proposing.
		if ce.StatusCode == 503 && ce.ErrorBody.Error != "not_leader" && ce.Stage != "" {
			return safety.Refused, ce.ErrorBody.Error + "/" + ce.Reason
		}
		return safety.Unknown, fmt.Sprintf("%d %s/%s", ce.StatusCode, ce.ErrorBody.Error, ce.Reason)
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return safety.Refused, "dial"
	}
	return safety.Unknown, err.Error()
}

func (r *Runner) begin(id int, kind safety.Kind, t Target, name, holder string) safety.Op {
	return safety.Op{Client: id, Kind: kind, Ticket: name, Holder: holder, Node: t.Name, OffsetsMs: r.offsets(), Call: r.Now()}
}

func (r *Runner) finish(op safety.Op, err error) {
	op.Return = r.Now()
	if err == nil {
		op.Outcome = safety.OK
	} else {
		op.Outcome, op.Code = classify(err)
	}
	r.h.Add(op)
}

func (r *Runner) grant(ctx context.Context, id int, t Target, name, holder string) (*client.Lease, bool) {
	op := r.begin(id, safety.Grant, t, name, holder)
	op.LeaseS = r.cfg.LeaseS
	ctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	l, err := t.Client.Grant(ctx, name, holder, r.cfg.LeaseS)
	if err == nil {
		op.Token, op.Deadline = l.Token, r.At(l.Deadline)
	}
	var ce *client.Error
	if errors.As(err, &ce) && ce.ErrorBody.Error == "held" {
		op.RespHolder, op.RespToken = ce.Holder, ce.Token
	}
	r.finish(op, err)
	return l, err == nil
}

func (r *Runner) renew(ctx context.Context, id int, t Target, name, holder string, token uint64) (*client.Lease, bool) {
	op := r.begin(id, safety.Renew, t, name, holder)
	op.LeaseS, op.Token = r.cfg.LeaseS, token
	ctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	l, err := t.Client.Renew(ctx, name, holder, token, r.cfg.LeaseS)
	if err == nil {
		op.Deadline = r.At(l.Deadline)
		if l.Token != token {
			op.Code = fmt.Sprintf("renew answered token %d", l.Token)
		}
	}
	r.finish(op, err)
	return l, err == nil
}

func (r *Runner) release(ctx context.Context, id int, t Target, name, holder string, token uint64) {
	op := r.begin(id, safety.Release, t, name, holder)
	op.Token = token
	ctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	_, err := t.Client.Release(ctx, name, holder, token)
	r.finish(op, err)
}

// get reads name and records the read; it returns the token found (0:
// free, or the read failed).
func (r *Runner) get(ctx context.Context, id int, t Target, name string) uint64 {
	op := r.begin(id, safety.Get, t, name, "")
	ctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	g, err := t.Client.Get(ctx, name)
	if errors.Is(err, client.ErrNotFound) {
		err = nil
	} else if err == nil {
		op.RespHolder, op.RespToken, op.ServerExpiryMs, op.RespRevoked = g.Holder, g.Token, g.ServerExpiryUnixMs, g.Revoked
	}
	if err != nil {
		return 0 // a failed read has no effect and proves nothing
	}
	r.finish(op, nil)
	return op.RespToken
}

// Write offers a write with token to the register and records it.
func (r *Runner) Write(id int, name, holder string, token uint64) bool {
	return r.write(id, name, holder, token)
}

func (r *Runner) write(id int, name, holder string, token uint64) bool {
	op := safety.Op{Client: id, Kind: safety.Write, Ticket: name, Holder: holder, Token: token, Call: r.Now()}
	ok := r.reg.Write(name, token)
	op.Return = r.Now()
	op.Outcome = safety.OK
	if !ok {
		op.Outcome = safety.Refused
	}
	r.h.Add(op)
	return ok
}
