package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/protocol"
)

// Item 5 (a): failover when the leader's clock goes bad. Each node of a
// fresh 3-node cluster reaches the one `tckclk-agent --dev` through a
// proxy of its own in this process (a liar): it relays each exchange
// unchanged until told to lie, then shifts the reference it relays by
// lieOffset and signs it again with the same dev key, as an agent whose
// reference stepped would answer. The leader's next sample fails with
// `offset` (SPEC §3.3), it latches FAILED, hands leadership to a healthy
// voter and shuts Raft down (§3.4). A FAILED node never comes back, so
// every trial starts a fresh cluster (keys, data, agent) and stops it
// after: cheaper and simpler than bringing a replacement NodeId in
// (which the reconciler promotes only after its debounce and catch-up).
//
// The figure is the time from the first lying answer written to the
// leader (the leader's FAILED) to the first successful Grant+Release
// through the two survivors, which forward to the new leader. Probes
// start once the old leader shows FAILED on /v1/status, so none of them
// can be a grant the old leader admitted in the microseconds before it
// read the lie; they are timed from the lie all the same (conservative).
// The detection delay (the switch to the first lying answer: up to one
// probe interval) is reported apart.

// lieOffset is how far the liar moves the reference: past max_offset_ms
// (Δ/4 = 3 s with clockFlags' Δ 12 s).
const lieOffset = 10 * time.Second

// clockFailoverFlags make the nodes probe every second, whatever
// clockFlags say (a longer interval would only stretch the detection
// delay; the figure starts after it).
var clockFailoverFlags = []string{"--clock.probe_interval_ms", "1000", "--clock.probe_timeout_ms", "1000"}

type clockFailoverResult struct {
	failoverResult
	Detect  []time.Duration `json:"detect_ns"` // switch → first lying answer, per successful trial
	Reasons []string        `json:"reasons"`   // the old leader's FAILED reason, per successful trial
}

// liar relays TCKCLK/2 exchanges to upstream, lying when told.
type liar struct {
	ln       net.Listener
	upstream string
	key      *protocol.Key
	lying    atomic.Bool
	once     sync.Once
	firstLie chan time.Time // the instant the first lying answer was written
	wg       sync.WaitGroup
}

func newLiar(upstream string, key []byte) (*liar, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &liar{ln: ln, upstream: upstream, key: protocol.NewKey(key), firstLie: make(chan time.Time, 1)}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

func (l *liar) addr() string { return l.ln.Addr().String() }

func (l *liar) close() { l.ln.Close(); l.wg.Wait() }

func (l *liar) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer c.Close()
			_ = l.relay(c)
		}()
	}
}

// relay answers one exchange on c with upstream's answer, or a lie.
func (l *liar) relay(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req, err := bufio.NewReaderSize(c, protocol.MaxLine+1).ReadSlice('\n')
	if err != nil {
		return err
	}
	up, err := net.DialTimeout("tcp", l.upstream, 2*time.Second)
	if err != nil {
		return err
	}
	defer up.Close()
	_ = up.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := up.Write(req); err != nil {
		return err
	}
	line, err := readAnswer(up)
	if err != nil {
		return err
	}
	lying := l.lying.Load()
	out := append(line, '\n')
	if lying {
		r, err := protocol.ParseResponseAny(line)
		if err != nil {
			return err
		}
		r.ReferenceUnixMs += uint64(lieOffset.Milliseconds())
		l.key.Sign(&r)
		out = protocol.EncodeResponse(&r)
	}
	if _, err := c.Write(out); err != nil {
		return err
	}
	if lying {
		l.once.Do(func() { l.firstLie <- time.Now() })
	}
	return nil
}

func clockFailover(ctx context.Context, e *env, trials int, out io.Writer) clockFailoverResult {
	res := clockFailoverResult{failoverResult: failoverResult{Target: "ticketd ×3 clock FAILED"}}
	for t := 1; t <= trials && ctx.Err() == nil; t++ {
		took, detect, reason, err := clockFailoverTrial(ctx, e, t)
		if err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("trial %d: %v", t, err))
			fmt.Fprintf(out, "clock failover trial %2d: %v\n", t, err)
			continue
		}
		res.Trials = append(res.Trials, took)
		res.Detect = append(res.Detect, detect)
		res.Reasons = append(res.Reasons, reason)
		fmt.Fprintf(out, "clock failover trial %2d: leader's FAILED (%s) to the first grant on the new leader %v (detected %v after the switch)\n",
			t, reason, took.Round(time.Millisecond), detect.Round(time.Millisecond))
	}
	return res
}

func clockFailoverTrial(ctx context.Context, e *env, trial int) (took, detect time.Duration, reason string, err error) {
	k := len(e.procs)
	defer e.stopFrom(k)
	var liars []*liar
	defer func() {
		for _, l := range liars {
			l.close()
		}
	}()
	spec := clusterSpec{n: 3, prefix: fmt.Sprintf("clockfo%d-", trial), extra: clockFailoverFlags,
		nodeAgent: func(_ int, devAgent, keys string) (string, error) {
			_, key, err := devKeys(filepath.Join(keys, "clock.secret"))
			if err != nil {
				return "", err
			}
			l, err := newLiar(devAgent, key)
			if err != nil {
				return "", err
			}
			liars = append(liars, l)
			return l.addr(), nil
		}}
	s, err := e.startTicketdSpec(ctx, spec)
	if err != nil {
		return 0, 0, "", withLogs(err, e)
	}
	var lead int
	err = poll(ctx, 60*time.Second, s.procs, func() error {
		var err error
		if lead, err = leaderOf(ctx, s); err == nil && lead < 0 {
			err = errors.New("no leader")
		}
		if err == nil {
			err = allVoters(ctx, s, lead)
		}
		return err
	})
	if err != nil {
		return 0, 0, "", fmt.Errorf("forming: %w", err)
	}
	var survivors []string
	for i, a := range s.addrs {
		if i != lead {
			survivors = append(survivors, a)
		}
	}
	p, err := newTicketdProber(survivors)
	if err != nil {
		return 0, 0, "", err
	}
	defer p.close()
	if _, err := p.try(ctx, 0); err != nil {
		return 0, 0, "", fmt.Errorf("probe before the switch: %w", err)
	}
	switched := time.Now()
	liars[lead].lying.Store(true)
	var lied time.Time
	select {
	case lied = <-liars[lead].firstLie:
	case <-time.After(30 * time.Second):
		return 0, 0, "", errors.New("the leader asked its agent nothing for 30 s after the switch")
	case <-ctx.Done():
		return 0, 0, "", ctx.Err()
	}
	old, err := client.New(s.addrs[lead])
	if err != nil {
		return 0, 0, "", err
	}
	err = poll(ctx, 10*time.Second, nil, func() error {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := old.Status(sctx)
		if err != nil {
			return err
		}
		if st.Clock.Stage != "failed" {
			return fmt.Errorf("old leader's clock stage %q", st.Clock.Stage)
		}
		reason = st.Clock.Reason
		return nil
	})
	if err != nil {
		return 0, 0, "", fmt.Errorf("the lying leader did not fail: %w", err)
	}
	took, _, err = firstSuccess(ctx, p, lied)
	if err != nil {
		return 0, 0, "", err
	}
	// The grant came from a survivor's leadership (the old leader serves
	// 503 now: only the survivors are asked).
	led := false
	for _, a := range survivors {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		is, err := nodeIsLeader(sctx, "ticketd", a)
		cancel()
		led = led || (err == nil && is)
	}
	if !led {
		return 0, 0, "", errors.New("no survivor leads after the failover")
	}
	return took, lied.Sub(switched), reason, nil
}
