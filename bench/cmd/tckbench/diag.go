package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Diagnostics of one measured window, only with
// -profile / -strace: strace slows the traced process, so these runs are
// for finding the bottleneck, not for the figures.
type diag struct {
	Fsyncs        int64    `json:"fsyncs,omitempty"`       // fsync+fdatasync calls by the leader
	Syscalls      int64    `json:"syscalls,omitempty"`     // every traced syscall (with -strace-all)
	Entries       uint64   `json:"raft_entries,omitempty"` // Raft index advance over the window
	EntriesPerSyn float64  `json:"entries_per_fsync,omitempty"`
	Profiles      []string `json:"profiles,omitempty"`
	Strace        string   `json:"strace,omitempty"` // strace -c's table (time per fsync)
}

// raftIndex is the leader's Raft index (ticketd: commit_index; etcd: raft_index).
func raftIndex(ctx context.Context, s *server) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if s.system == "etcd" {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return 0, err
		}
		defer cli.Close()
		st, err := cli.Status(ctx, s.endpoint)
		if err != nil {
			return 0, err
		}
		return st.RaftIndex, nil
	}
	c, err := client.New(s.endpoint)
	if err != nil {
		return 0, err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return 0, err
	}
	return st.Raft.CommitIndex, nil
}

// straceCalls matches a line of strace -c's table: % time, seconds,
// usecs/call, calls, [errors,] syscall.
var straceCalls = regexp.MustCompile(`(?m)^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)\s*$`)

// straceTotal matches strace -c's total line.
var straceTotal = regexp.MustCompile(`(?m)^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?total\s*$`)

// countTotal is the total calls of strace -c output.
func countTotal(out string) int64 {
	m := straceTotal.FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// countSyncs sums the fsync and fdatasync calls in strace -c output.
func countSyncs(out string) int64 {
	var n int64
	for _, m := range straceCalls.FindAllStringSubmatch(out, -1) {
		c, _ := strconv.ParseInt(m[1], 10, 64)
		n += c
	}
	return n
}

// startDiag begins the diagnostics of a window on s; the function it
// returns ends them and fills d.
func startDiag(ctx context.Context, o options, s *server, tag string, d *diag) func() error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
	var st *exec.Cmd
	var stOut bytes.Buffer
	if o.strace {
		args := []string{"-f", "-c", "-e", "trace=fsync,fdatasync"}
		if o.straceAll {
			args = []string{"-f", "-c"}
		}
		st = exec.Command("strace", append(args, "-p", strconv.Itoa(s.procs[s.leader].pid()))...)
		st.Stderr, st.Stdout = &stOut, &stOut
		if err := st.Start(); err != nil {
			return func() error { return fmt.Errorf("strace: %w", err) }
		}
		time.Sleep(300 * time.Millisecond) // let strace attach; the window is seconds long
	}
	idx0, err := raftIndex(ctx, s)
	if err != nil {
		if st != nil {
			_ = st.Process.Kill()
			_ = st.Wait()
		}
		return func() error { return fmt.Errorf("raft index: %w", err) }
	}
	if o.profile != "" && strings.HasPrefix(s.system, "ticketd") {
		secs := max(1, int(o.duration.Seconds()))
		type want struct{ addr, kind, name string }
		wants := []want{{s.pprof[s.leader], "profile", "cpu"}, {s.pprof[s.leader], "block", "block"}, {s.pprof[s.leader], "mutex", "mutex"},
			{s.pprof[s.leader], "allocs", "allocs"}} // allocs: objects allocated in the window (sampled), for allocations per request
		if len(s.pprof) > 1 { // and one follower's CPU: replication, its log, its FSM
			wants = append(wants, want{s.pprof[(s.leader+1)%len(s.pprof)], "profile", "follower-cpu"})
		}
		for _, w := range wants {
			addr, kind := w.addr, w.kind
			wg.Add(1)
			go func() {
				defer wg.Done()
				file := filepath.Join(o.profile, fmt.Sprintf("%s-%s.pprof", tag, w.name))
				if err := fetch(ctx, fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", addr, kind, secs), file); err != nil {
					fail(err)
					return
				}
				mu.Lock()
				d.Profiles = append(d.Profiles, file)
				mu.Unlock()
			}()
		}
	}
	stopClientProfile := func() {}
	if o.profile != "" && strings.HasPrefix(s.system, "ticketd") {
		// The load generator's own CPU over the window: the measured
		// target's clients (the Go client, its HTTP transport).
		file := filepath.Join(o.profile, tag+"-client-cpu.pprof")
		if f, err := os.Create(file); err != nil {
			fail(err)
		} else if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			fail(err)
		} else {
			stopClientProfile = func() {
				pprof.StopCPUProfile()
				if err := f.Close(); err != nil {
					fail(err)
					return
				}
				mu.Lock()
				d.Profiles = append(d.Profiles, file)
				mu.Unlock()
			}
		}
	}
	return func() error {
		stopClientProfile()
		idx1, err := raftIndex(ctx, s)
		if err != nil {
			fail(err)
		} else {
			d.Entries = idx1 - idx0
		}
		if st != nil {
			_ = st.Process.Signal(syscall.SIGINT)
			_ = st.Wait()
			d.Fsyncs = countSyncs(stOut.String())
			d.Strace = stOut.String()
			if o.straceAll {
				d.Syscalls = countTotal(d.Strace)
			}
			if d.Fsyncs == 0 {
				fail(fmt.Errorf("strace counted no fsyncs: %s", strings.TrimSpace(stOut.String())))
			}
		}
		wg.Wait()
		if d.Fsyncs > 0 {
			d.EntriesPerSyn = float64(d.Entries) / float64(d.Fsyncs)
		}
		return errors.Join(errs...)
	}
}

func fetch(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s %s", url, resp.Status, b)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
