package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tckclk/tckclk/protocol"
)

// Issue item 7: the agent against a bare TCP server measured in the same run.
//
//	go test -run '^$' -bench 'AgentVsBare|Slowloris' -benchtime 1x ./agent/
//
// Both benchmarks print a table; targets: agent throughput ≥ 0.8× the bare
// server, p99 ≤ 2× the bare p99; under 10,000 silent connections the other
// clients' p99 ≤ 2× the agent's normal p99, RSS growth ≤ 64 MiB, every
// silent connection closed after the read timeout.

// bareServer is the floor: it reads up to the first LF and answers one
// fixed, pre-signed line, without parsing or signing anything.
type bareServer struct {
	ln   net.Listener
	line []byte
	wg   sync.WaitGroup
}

func startBare(tb testing.TB, line []byte) *bareServer {
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &bareServer{ln: ln, line: line}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				var buf [protocol.MaxLine + 1]byte
				n := 0
				for n < len(buf) {
					m, err := c.Read(buf[n:])
					if m > 0 && slices.Contains(buf[n:n+m], '\n') {
						c.Write(s.line)
						return
					}
					n += m
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	tb.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

// loadResult is one load phase.
type loadResult struct {
	n       int
	errs    int
	elapsed time.Duration
	lat     []time.Duration
}

func (r loadResult) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

func (r loadResult) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	s := slices.Clone(r.lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// load runs `workers` clients doing full exchanges (connect, request, read
// the line, wait for EOF, parse, verify) for d. With fixedNonce the server is
// the bare one: its line carries a fixed nonce, so the nonce echo is not
// compared but the same parse and MAC verification run.
func load(addr string, keys protocol.KeyRing, workers int, d time.Duration, bare bool) loadResult {
	var mu sync.Mutex
	res := loadResult{}
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			errs := 0
			lr := protocol.NewLineReader(nil)
			var req []byte
			for time.Now().Before(stop) {
				t0 := time.Now()
				nonce, _ := protocol.NewNonce()
				req = protocol.AppendRequest(req[:0], protocol.Request{Nonce: nonce})
				err := func() error {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						return err
					}
					defer c.Close()
					c.SetDeadline(t0.Add(5 * time.Second))
					if _, err := c.Write(req); err != nil {
						return err
					}
					lr.Reset(c)
					line, err := lr.ReadLine()
					if err != nil {
						return err
					}
					if err := lr.ExpectEOF(); err != nil {
						return err
					}
					if bare {
						r, err := protocol.ParseResponseAny(line)
						if err == nil {
							err = keys.Verify(&r)
						}
						return err
					}
					_, err = protocol.ParseVerify(line, nonce, keys)
					return err
				}()
				if err != nil {
					errs++
					continue
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			res.n += len(lat)
			res.errs += errs
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

func merge(rs []loadResult) loadResult {
	var m loadResult
	for _, r := range rs {
		m.n += r.n
		m.errs += r.errs
		m.elapsed += r.elapsed
		m.lat = append(m.lat, r.lat...)
	}
	return m
}

func benchAgent(b *testing.B, cfg Config) *running {
	b.Helper()
	return startAgent(b, cfg, Options{Logger: quietLogger()})
}

// BenchmarkAgentVsBare: throughput and p99 of full exchanges against the
// agent and against the bare server, interleaved in rounds so machine noise
// hits both alike, at 1, 8 and 16 concurrent clients (one sub-benchmark
// each: -bench 'AgentVsBare/clients=1$' runs only the single client).
func BenchmarkAgentVsBare(b *testing.B) {
	cfg := devConfig(b)
	r := benchAgent(b, cfg)
	keys := devKeys()
	// The bare line is a valid response signed under the dev key for a fixed
	// nonce: clients parse and verify it exactly as the agent's.
	fixed := protocol.Response{Nonce: protocol.Nonce{1}, ReferenceUnixMs: uint64(time.Now().UnixMilli()), UncertaintyMs: 2, Synced: true, SourceAgeMs: 5}
	keys[0].Sign(&fixed)
	bare := startBare(b, protocol.EncodeResponse(&fixed))
	for _, workers := range []int{1, 8, 16} {
		b.Run(fmt.Sprintf("clients=%d", workers), func(b *testing.B) {
			agentVsBare(b, r.Addr().String(), bare.ln.Addr().String(), keys, workers)
		})
	}
}

func agentVsBare(b *testing.B, agentAddr, bareAddr string, keys protocol.KeyRing, workers int) {
	const rounds, phase = 12, 600 * time.Millisecond
	// Warm up both.
	load(agentAddr, keys, workers, 300*time.Millisecond, false)
	load(bareAddr, keys, workers, 300*time.Millisecond, true)
	var ag, br []loadResult
	b.ResetTimer()
	for i := range rounds {
		// Alternate which goes first: a slow spell hits both alike.
		if i%2 == 0 {
			ag = append(ag, load(agentAddr, keys, workers, phase, false))
			br = append(br, load(bareAddr, keys, workers, phase, true))
		} else {
			br = append(br, load(bareAddr, keys, workers, phase, true))
			ag = append(ag, load(agentAddr, keys, workers, phase, false))
		}
	}
	b.StopTimer()
	a, f := merge(ag), merge(br)
	thr := a.rate() / f.rate()
	p99 := float64(a.pct(0.99)) / float64(f.pct(0.99))
	var thrRounds, p99Rounds []float64
	for i := range ag {
		thrRounds = append(thrRounds, ag[i].rate()/br[i].rate())
		p99Rounds = append(p99Rounds, float64(ag[i].pct(0.99))/float64(br[i].pct(0.99)))
	}
	slices.Sort(thrRounds)
	slices.Sort(p99Rounds)
	fmt.Printf("\nagent vs bare TCP server, %d concurrent clients, %d rounds × %v each, loopback, GOMAXPROCS=%d\n", workers, rounds, phase, runtime.GOMAXPROCS(0))
	fmt.Printf("%-8s %12s %10s %10s %10s %7s\n", "server", "exchanges/s", "p50", "p99", "p99.9", "errors")
	for _, x := range []struct {
		name string
		r    loadResult
	}{{"agent", a}, {"bare", f}} {
		fmt.Printf("%-8s %12.0f %10v %10v %10v %7d\n", x.name, x.r.rate(), x.r.pct(0.5).Round(time.Microsecond), x.r.pct(0.99).Round(time.Microsecond), x.r.pct(0.999).Round(time.Microsecond), x.r.errs)
	}
	fmt.Printf("ratio (pooled)           throughput %.2f× (target ≥ 0.80)   p99 %.2f× (target ≤ 2.00)\n", thr, p99)
	fmt.Printf("ratio (median of rounds) throughput %.2f×                   p99 %.2f×\n", thrRounds[len(thrRounds)/2], p99Rounds[len(p99Rounds)/2])
	for i := range ag {
		fmt.Printf("  round %2d: agent %6.0f/s p99 %9v | bare %6.0f/s p99 %9v\n", i+1, ag[i].rate(), ag[i].pct(0.99).Round(time.Microsecond), br[i].rate(), br[i].pct(0.99).Round(time.Microsecond))
	}
	b.ReportMetric(thr, "throughput-ratio")
	b.ReportMetric(p99, "p99-ratio")
	b.ReportMetric(a.rate(), "agent-exch/s")
	b.ReportMetric(f.rate(), "bare-exch/s")
	if a.errs > 0 {
		b.Errorf("%d agent exchanges failed", a.errs)
	}
}

// holderEnv starts runHolder in a child process: it opens COUNT
// silent connections to ADDR and holds them (the child has its own file
// descriptor limit; the agent under test keeps its own).
const holderEnv = "TCKCLK_SLOWLORIS_HOLDER"

// BenchmarkSlowloris: 10,000 silent connections held open against the
// agent; the other clients' p99, RSS growth, and that every silent
// connection is closed by the agent after its read timeout.
func BenchmarkSlowloris(b *testing.B) {
	for _, tc := range []struct {
		name      string
		readMs    uint64
		reconnect bool
	}{
		// All 10,000 held at once for the whole window: the longest read
		// timeout the agent allows.
		{"held-10s", 10000, false},
		// The default 2 s read timeout with the attacker re-opening every
		// closed connection, keeping 10,000 open.
		{"reopened-2s", DefaultReadTimeoutMs, true},
	} {
		b.Run(tc.name, func(b *testing.B) { slowloris(b, tc.readMs, tc.reconnect) })
	}
}

func slowloris(b *testing.B, readMs uint64, reconnect bool) {
	const silent, workers = 10000, 8
	// The agent under test runs in a fresh child process (its RSS is its
	// own, untouched by earlier runs or by these load clients), the silent
	// connections come from another child (its own descriptor limit).
	ag := startChildAgent(b, readMs)
	addr := ag.addr
	keys := devKeys()
	load(addr, keys, workers, 500*time.Millisecond, false) // warm-up
	normal := load(addr, keys, workers, 3*time.Second, false)
	rss0 := procRSS(ag.pid)

	window := 5 * time.Second
	holdFor := time.Duration(0)
	if reconnect {
		holdFor = window + 2*time.Second
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%d", holderEnv, addr, silent, holdFor.Milliseconds()))
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "holder ") {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	next := func(what string, within time.Duration) string {
		select {
		case l, ok := <-lines:
			if !ok {
				b.Fatalf("holder exited before %s", what)
			}
			return l
		case <-time.After(within):
			b.Fatalf("holder: no %s within %v", what, within)
		}
		return ""
	}
	opened := next("open report", 60*time.Second)
	openAt := time.Now()
	held := ag.metric(b, "tckclk_agent_connections_open")
	var peak atomic.Int64
	peak.Store(rss0)
	stopRSS := make(chan struct{})
	rssDone := make(chan struct{})
	go func() {
		defer close(rssDone)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopRSS:
				return
			case <-t.C:
				if v := procRSS(ag.pid); v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	}()
	if !reconnect {
		window = min(window, time.Duration(readMs)*time.Millisecond-time.Since(openAt)-time.Second)
	}
	attacked := load(addr, keys, workers, window, false)
	heldAfter := ag.metric(b, "tckclk_agent_connections_open")
	memLine := fmt.Sprintf("agent's Go memory then: stacks %.0f MiB, heap in use %.0f MiB, goroutines %.0f",
		ag.metric(b, "go_memstats_stack_inuse_bytes")/(1<<20), ag.metric(b, "go_memstats_heap_inuse_bytes")/(1<<20), ag.metric(b, "go_goroutines"))
	close(stopRSS)
	<-rssDone
	closed := next("closed report", time.Duration(readMs)*time.Millisecond+60*time.Second)
	cmd.Wait()

	growth := peak.Load() - rss0
	p99Ratio := float64(attacked.pct(0.99)) / float64(normal.pct(0.99))
	mode := "held"
	if reconnect {
		mode = "re-opened as the agent closes them"
	}
	fmt.Printf("\nslowloris: %d silent connections (%s), read_timeout %d ms, %d other clients; agent in its own process\n", silent, mode, readMs, workers)
	fmt.Printf("  %s\n  %s\n", opened, closed)
	fmt.Printf("  agent held %.0f connections when the window began, %.0f when it ended\n  %s\n", held, heldAfter, memLine)
	fmt.Printf("%-10s %12s %10s %10s %7s\n", "phase", "exchanges/s", "p50", "p99", "errors")
	fmt.Printf("%-10s %12.0f %10v %10v %7d\n", "normal", normal.rate(), normal.pct(0.5).Round(time.Microsecond), normal.pct(0.99).Round(time.Microsecond), normal.errs)
	fmt.Printf("%-10s %12.0f %10v %10v %7d\n", "attacked", attacked.rate(), attacked.pct(0.5).Round(time.Microsecond), attacked.pct(0.99).Round(time.Microsecond), attacked.errs)
	fmt.Printf("p99 under attack %.2f× normal (target ≤ 2.00); agent RSS %d MiB → peak %d MiB, growth %.1f MiB (target ≤ 64)\n",
		p99Ratio, rss0>>20, peak.Load()>>20, float64(growth)/(1<<20))
	b.ReportMetric(p99Ratio, "p99-attacked/normal")
	b.ReportMetric(float64(growth)/(1<<20), "rss-growth-MiB")
	if attacked.errs > 0 {
		b.Errorf("%d exchanges of other clients failed under the attack", attacked.errs)
	}
	if !strings.Contains(closed, " unclosed=0 ") {
		b.Errorf("silent connections not closed by the agent: %s", closed)
	}
}

// benchAgentEnv makes the test binary run a --dev agent (TestMain runs it
// instead of the tests): the value is the read timeout in ms.
const benchAgentEnv = "TCKCLK_BENCH_AGENT"

type childAgent struct {
	addr, http string
	pid        int
}

// startChildAgent runs a --dev agent in a child process and returns its
// addresses; it is stopped (stdin closed, then killed) at cleanup.
func startChildAgent(b *testing.B, readMs uint64) *childAgent {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", benchAgentEnv, readMs))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "agent" {
			go io.Copy(io.Discard, out)
			return &childAgent{addr: f[1], http: f[2], pid: cmd.Process.Pid}
		}
	}
	b.Fatal("the child agent did not start")
	return nil
}

// metric reads one unlabelled series from the child's /metrics.
func (c *childAgent) metric(b *testing.B, name string) float64 {
	resp, err := http.Get("http://" + c.http + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// runBenchAgent is the child process of startChildAgent.
func runBenchAgent(readMs string) {
	ms, _ := strconv.ParseUint(readMs, 10, 64)
	dir, err := os.MkdirTemp("", "tckclk-bench-agent-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	sec := dir + "/secret"
	if err := os.WriteFile(sec, testSecret, 0o600); err != nil {
		panic(err)
	}
	cfg := DefaultConfig()
	cfg.Dev, cfg.Listen, cfg.HTTP, cfg.SecretFile, cfg.ReadTimeoutMs = true, "127.0.0.1:0", "127.0.0.1:0", sec, ms
	a, err := New(cfg, Options{Logger: quietLogger(), Env: noEnv})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }() // the parent closed stdin or died
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
		fmt.Printf("agent %s %s\n", a.Addr(), a.HTTPAddr())
	case err := <-done:
		panic(err)
	}
	if err := <-done; err != nil {
		panic(err)
	}
}

// procRSS is a process's resident set (VmRSS).
func procRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

// runHolder is the child process of BenchmarkSlowloris (TestMain runs it
// instead of the tests when holderEnv is set).
func runHolder(spec string) {
	parts := strings.Split(spec, ",")
	addr := parts[0]
	count, _ := strconv.Atoi(parts[1])
	holdMs, _ := strconv.Atoi(parts[2])
	var rl syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	if rl.Cur < uint64(count)+256 {
		rl.Cur = min(rl.Max, uint64(count)+1024)
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	var (
		mu        sync.Mutex
		lifetimes []time.Duration
		unclosed  int
		dialErrs  atomic.Int64
		opens     atomic.Int64
	)
	reopenUntil := time.Now().Add(time.Duration(holdMs) * time.Millisecond)
	var wg sync.WaitGroup
	// holdOne keeps one silent connection and, in reconnect mode, opens a
	// new one whenever the agent closes it.
	holdOne := func(c net.Conn) {
		defer wg.Done()
		for {
			start := time.Now()
			c.SetReadDeadline(start.Add(15 * time.Second))
			_, err := io.Copy(io.Discard, c) // the agent sends nothing and closes
			life := time.Since(start)
			c.Close()
			mu.Lock()
			if err != nil {
				unclosed++ // our deadline, not the agent's close
			} else {
				lifetimes = append(lifetimes, life)
			}
			mu.Unlock()
			if time.Now().After(reopenUntil) {
				return
			}
			var derr error
			if c, derr = net.Dial("tcp", addr); derr != nil {
				dialErrs.Add(1)
				return
			}
			opens.Add(1)
		}
	}
	sem := make(chan struct{}, 64)
	var dialWG sync.WaitGroup
	for range count {
		sem <- struct{}{}
		dialWG.Add(1)
		go func() {
			defer func() { <-sem; dialWG.Done() }()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				dialErrs.Add(1)
				return
			}
			opens.Add(1)
			wg.Add(1)
			go holdOne(c)
		}()
	}
	dialWG.Wait()
	fmt.Printf("holder opened=%d dial_errors=%d\n", opens.Load(), dialErrs.Load())
	wg.Wait()
	mu.Lock()
	slices.Sort(lifetimes)
	var p50, p99, maxL time.Duration
	if n := len(lifetimes); n > 0 {
		p50, p99, maxL = lifetimes[n/2], lifetimes[min(n-1, n*99/100)], lifetimes[n-1]
	}
	fmt.Printf("holder closed_by_agent=%d unclosed=%d total_opened=%d lifetime p50=%v p99=%v max=%v\n",
		len(lifetimes), unclosed, opens.Load(), p50.Round(time.Millisecond), p99.Round(time.Millisecond), maxL.Round(time.Millisecond))
	mu.Unlock()
}
