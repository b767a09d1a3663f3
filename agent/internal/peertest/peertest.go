// Package peertest starts the real time-service peers the agent's tests run
// against — two chronyd -x instances on loopback, ptp4l -S over a veth pair
// between two network namespaces, facebook/time's NTP responder in-process —
// and cleans them up with t.Cleanup, also on failure. Nothing here touches
// the system clock: chronyd runs with -x, ptp4l with free_running 1.
//
// A test skips only when a binary is absent (Debian packages chrony,
// linuxptp, iproute2); any other failure to start a peer fails the test.
package peertest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/beevik/ntp"
	"github.com/facebook/time/ntp/chrony"
	"github.com/facebook/time/ntp/responder/announce"
	"github.com/facebook/time/ntp/responder/checker"
	"github.com/facebook/time/ntp/responder/server"
	"github.com/facebook/time/ntp/responder/stats"
	"github.com/facebook/time/timestamp"
)

// Need skips the test when a binary is not installed.
func Need(t testing.TB, bin, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		for _, dir := range []string{"/usr/sbin", "/sbin"} {
			if _, err := os.Stat(filepath.Join(dir, bin)); err == nil {
				return filepath.Join(dir, bin)
			}
		}
		t.Skipf("%s not installed (Debian package %s; CI installs it)", bin, pkg)
	}
	return p
}

// FreeUDPPort returns a loopback UDP port that was free a moment ago.
func FreeUDPPort(t testing.TB) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// Process is a peer started by a test.
type Process struct {
	Name   string
	cmd    *exec.Cmd
	out    *syncBuffer
	waited chan struct{}
	err    error
	once   sync.Once
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Start runs argv, logs its output at the end of the test and stops it in
// t.Cleanup.
func Start(t testing.TB, name string, argv ...string) *Process {
	t.Helper()
	p := &Process{Name: name, cmd: exec.Command(argv[0], argv[1:]...), out: &syncBuffer{}, waited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.waited) }()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	return p
}

// Stop ends the process (SIGTERM, then SIGKILL after 3 s) and waits.
func (p *Process) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM) // already gone: waited says so
		select {
		case <-p.waited:
		case <-time.After(3 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.waited
		}
	})
}

// Exited reports whether the process has ended, with its output.
func (p *Process) Exited() (bool, string) {
	select {
	case <-p.waited:
		return true, p.out.String()
	default:
		return false, ""
	}
}

// Output is what the process printed so far.
func (p *Process) Output() string { return p.out.String() }

// waitFor polls cond until true or the deadline; it fails the test naming
// what it waited for (a condition with a deadline, not a sleep).
func waitFor(t testing.TB, what string, within time.Duration, procs []*Process, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		for _, p := range procs {
			if done, out := p.Exited(); done {
				t.Fatalf("%s exited while waiting for %s:\n%s", p.Name, what, out)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ChronyPair is a chronyd server serving its local clock (local stratum 8)
// on a loopback NTP port, and a chronyd client of it, each with -x (no
// clock control), its own ports, sockets, pidfile and no drift file outside
// the test's temp dir.
type ChronyPair struct {
	Dir           string
	ServerNTPPort int    // the server's NTP port on 127.0.0.1
	ServerSocket  string // the server's command socket (its tracking: refid 7F7F0101)
	ClientSocket  string // the client's command socket
	ClientCmdPort int    // the client's UDP command port on 127.0.0.1
	Server        *Process
	Client        *Process
}

// StartChronyPair starts both and waits until the client has selected the
// server (its tracking shows refid 7F000001).
func StartChronyPair(t testing.TB) *ChronyPair {
	t.Helper()
	bin := Need(t, "chronyd", "chrony")
	dir, err := os.MkdirTemp("", "tckclk-chrony-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cp := &ChronyPair{Dir: dir, ServerNTPPort: FreeUDPPort(t), ClientCmdPort: FreeUDPPort(t),
		ServerSocket: filepath.Join(dir, "server.sock"), ClientSocket: filepath.Join(dir, "client.sock")}
	srvConf := fmt.Sprintf(`port %d
bindaddress 127.0.0.1
cmdport 0
bindcmdaddress %s
pidfile %s
driftfile %s
local stratum 8
allow 127.0.0.1
`, cp.ServerNTPPort, cp.ServerSocket, filepath.Join(dir, "server.pid"), filepath.Join(dir, "server.drift"))
	cliConf := fmt.Sprintf(`port 0
cmdport %d
bindcmdaddress 127.0.0.1
bindcmdaddress %s
pidfile %s
server 127.0.0.1 port %d iburst minpoll 0 maxpoll 0
`, cp.ClientCmdPort, cp.ClientSocket, filepath.Join(dir, "client.pid"), cp.ServerNTPPort)
	for name, conf := range map[string]string{"server.conf": srvConf, "client.conf": cliConf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	user := []string{"-u", "root"}
	if os.Geteuid() != 0 {
		user = []string{"-U"}
	}
	args := func(conf string) []string {
		return append(append([]string{bin, "-x", "-d"}, user...), "-f", filepath.Join(dir, conf))
	}
	cp.Server = Start(t, "chronyd server", args("server.conf")...)
	cp.Client = Start(t, "chronyd client", args("client.conf")...)
	procs := []*Process{cp.Server, cp.Client}
	waitFor(t, "the chronyd client to select the server", 30*time.Second, procs, func() bool {
		tr, err := Tracking(cp.ClientSocket)
		return err == nil && tr.RefID == 0x7F000001 && tr.LeapStatus != 3
	})
	return cp
}

var sockSeq atomic.Int64

// Tracking reads a chronyd's tracking report over its Unix socket (the
// tests' own check, independent of the agent's source).
func Tracking(sock string) (*chrony.Tracking, error) {
	local := filepath.Join(filepath.Dir(sock), fmt.Sprintf("peertest.%d.%d.sock", os.Getpid(), sockSeq.Add(1)))
	c, err := net.DialUnix("unixgram", &net.UnixAddr{Name: local, Net: "unixgram"}, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	defer os.Remove(local)
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return nil, err
	}
	r, err := (&chrony.Client{Connection: c}).Communicate(chrony.NewTrackingPacket())
	if err != nil {
		return nil, err
	}
	tr, ok := r.(*chrony.ReplyTracking)
	if !ok {
		return nil, fmt.Errorf("reply %T", r)
	}
	return &tr.Tracking, nil
}

// PTPPair is ptp4l -S as grandmaster in one network namespace and ptp4l -S
// slaveOnly in another, over a veth pair, both free_running (nothing steers
// a clock). The slave's management socket is SlaveUDS.
type PTPPair struct {
	Dir      string
	SlaveUDS string
	Master   *Process
	Slave    *Process
}

var nsSeq atomic.Int64

// StartPTPPair creates the namespaces and veth pair, starts both ptp4l and
// waits until the slave's port is UNCALIBRATED or SLAVE with a grandmaster
// (read with pmc, independent of the agent). accuracy is the grandmaster's
// clockAccuracy (e.g. 0x27: 100 µs).
func StartPTPPair(t testing.TB, accuracy uint8) *PTPPair {
	t.Helper()
	ptp4l := Need(t, "ptp4l", "linuxptp")
	pmc := Need(t, "pmc", "linuxptp")
	ipBin := Need(t, "ip", "iproute2")
	dir, err := os.MkdirTemp("", "tckclk-ptp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	id := fmt.Sprintf("tck%d%d", os.Getpid()%100000, nsSeq.Add(1))
	nsM, nsS := id+"m", id+"s"
	vM, vS := id+"a", id+"b"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ipBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", nsM)
	t.Cleanup(func() { _ = exec.Command(ipBin, "netns", "del", nsM).Run() })
	ip("netns", "add", nsS)
	t.Cleanup(func() { _ = exec.Command(ipBin, "netns", "del", nsS).Run() })
	ip("link", "add", vM, "type", "veth", "peer", "name", vS)
	ip("link", "set", vM, "netns", nsM)
	ip("link", "set", vS, "netns", nsS)
	for _, x := range [][2]string{{nsM, vM}, {nsS, vS}} {
		ip("-n", x[0], "link", "set", "lo", "up")
		ip("-n", x[0], "link", "set", x[1], "up")
	}
	pp := &PTPPair{Dir: dir, SlaveUDS: filepath.Join(dir, "slave.sock")}
	common := `network_transport L2
free_running 1
logSyncInterval -3
logAnnounceInterval -2
logMinDelayReqInterval -3
announceReceiptTimeout 3
`
	mConf := fmt.Sprintf("[global]\n%sclockAccuracy 0x%02X\nuds_address %s\n", common, accuracy, filepath.Join(dir, "master.sock"))
	sConf := fmt.Sprintf("[global]\n%sslaveOnly 1\nuds_address %s\n", common, pp.SlaveUDS)
	for name, conf := range map[string]string{"master.cfg": mConf, "slave.cfg": sConf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pp.Master = Start(t, "ptp4l master", ipBin, "netns", "exec", nsM, ptp4l, "-S", "-i", vM, "-f", filepath.Join(dir, "master.cfg"), "-m")
	pp.Slave = Start(t, "ptp4l slave", ipBin, "netns", "exec", nsS, ptp4l, "-S", "-i", vS, "-f", filepath.Join(dir, "slave.cfg"), "-m")
	waitFor(t, "the ptp4l slave to lock onto the master", 30*time.Second, []*Process{pp.Master, pp.Slave}, func() bool {
		out, err := exec.Command(pmc, "-u", "-s", pp.SlaveUDS, "-i", filepath.Join(dir, "pmc.sock"), "-b", "0", "GET PORT_DATA_SET", "GET TIME_STATUS_NP").CombinedOutput()
		s := string(out)
		return err == nil && strings.Contains(s, "gmPresent                  true") &&
			(strings.Contains(s, "UNCALIBRATED") || strings.Contains(s, "SLAVE"))
	})
	return pp
}

// StartResponder runs facebook/time's NTP responder (a second, independent
// NTP implementation) in this process on ip:port, serving the local clock
// shifted by offset (a falseticker when offset is large). It has no
// shutdown: its goroutines live until the test binary exits. It logs with
// logrus's global logger (to stderr, info level).
func StartResponder(t testing.TB, ip string, port int, offset time.Duration) string {
	t.Helper()
	addr := net.JoinHostPort(ip, fmt.Sprint(port))
	// The responder log.Fatal()s on a bind failure: check the port first.
	if c, err := net.ListenPacket("udp", addr); err != nil {
		t.Fatalf("responder port %s: %v", addr, err)
	} else {
		c.Close()
	}
	s := &server.Server{
		Config: server.Config{
			IPs: server.MultiIPs{net.ParseIP(ip)}, Port: port, Iface: "lo", Workers: 2,
			TimestampType: timestamp.SWRX, Stratum: 1, RefID: "TEST", ExtraOffset: offset,
		},
		Stats:    &stats.JSONStats{},
		Checker:  &checker.SimpleChecker{ExpectedListeners: 1, ExpectedWorkers: 2},
		Announce: &announce.NoopAnnounce{},
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go s.Start(ctx, cancel)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := ntp.QueryWithOptions(addr, ntp.QueryOptions{Timeout: 200 * time.Millisecond})
		if err == nil && r.Validate() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("responder on %s not answering: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr
}
