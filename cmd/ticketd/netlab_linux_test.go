package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/tckclk/tckclk/internal/clustertest"

	"golang.org/x/sys/unix"
)

// netLab is a private network a test builds out of Linux network
// namespaces: one namespace per node plus one for the clients, each joined
// by a veth pair to a bridge in the root namespace, addressed in
// 10.77.0.0/24 inside the namespaces only (the root namespace gets no
// address and no route). Faults are nftables drops and tc netem qdiscs
// inside a node's namespace. Everything is removed in t.Cleanup, also when
// the test fails; what a killed test binary left behind (its pid is in
// every name) is swept by the next lab.
type netLab struct {
	t                    *testing.T
	ipBin, tcBin, nftBin string
	bridge               string
	nodeNS               []string // namespace of node i
	addrs                []string // address of node i (10.77.0.i+1)
	clientNS             string
	clientAddr           string
	clientNSFile         *os.File // /run/netns/<clientNS>, for dial
}

const labPrefix = "tckclk"

var labSeq atomic.Int32

// newNetLab builds the lab for n nodes, or skips the test when it cannot:
// not root, or ip / tc / nft not installed.
func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs the tests as root)")
	}
	l := &netLab{t: t}
	for _, tool := range []struct {
		bin, pkg string
		p        *string
	}{{"ip", "iproute2", &l.ipBin}, {"tc", "iproute2", &l.tcBin}, {"nft", "nftables", &l.nftBin}} {
		if *tool.p = clustertest.LookTool(tool.bin); *tool.p == "" {
			t.Skipf("%s not installed (Debian package %s; CI installs it)", tool.bin, tool.pkg)
		}
	}
	l.sweep()
	id := fmt.Sprintf("%d%c", os.Getpid(), 'a'+labSeq.Add(1)%26)
	l.bridge = "tkb" + id
	l.run(l.ipBin, "link", "add", l.bridge, "type", "bridge")
	t.Cleanup(func() { l.quiet(l.ipBin, "link", "del", l.bridge) })
	l.run(l.ipBin, "link", "set", l.bridge, "up")
	// Docker sets the FORWARD policy to DROP, and with br_netfilter
	// bridged frames pass through it: let the lab's bridge forward, in
	// whichever iptables (nf_tables or legacy) Docker may have used.
	for _, ipt := range clustertest.IptablesTools() {
		rule := []string{"FORWARD", "-i", l.bridge, "-o", l.bridge, "-j", "ACCEPT"}
		l.run(ipt, append([]string{"-I"}, rule...)...)
		t.Cleanup(func() { l.quiet(ipt, append([]string{"-D"}, rule...)...) })
	}
	for i := range n + 1 {
		ns := fmt.Sprintf("%s-%s-n%d", labPrefix, id, i+1)
		addr := fmt.Sprintf("10.77.0.%d", i+1)
		if i == n {
			ns, addr = fmt.Sprintf("%s-%s-client", labPrefix, id), "10.77.0.100"
		}
		host, peer := fmt.Sprintf("tkv%sh%d", id, i), fmt.Sprintf("tkv%sp%d", id, i)
		l.run(l.ipBin, "netns", "add", ns)
		t.Cleanup(func() { l.quiet(l.ipBin, "netns", "del", ns) })
		l.run(l.ipBin, "link", "add", host, "type", "veth", "peer", "name", peer)
		t.Cleanup(func() { l.quiet(l.ipBin, "link", "del", host) }) // gone with the namespace already, normally
		l.run(l.ipBin, "link", "set", peer, "netns", ns)
		l.run(l.ipBin, "link", "set", host, "master", l.bridge, "up")
		l.run(l.ipBin, "-n", ns, "link", "set", peer, "name", "eth0")
		l.run(l.ipBin, "-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
		l.run(l.ipBin, "-n", ns, "link", "set", "eth0", "up")
		l.run(l.ipBin, "-n", ns, "link", "set", "lo", "up")
		if i == n {
			l.clientNS, l.clientAddr = ns, addr
		} else {
			l.nodeNS, l.addrs = append(l.nodeNS, ns), append(l.addrs, addr)
		}
	}
	f, err := os.Open("/run/netns/" + l.clientNS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	l.clientNSFile = f
	return l
}

// run runs a command of the lab's setup and fails the test if it fails.
func (l *netLab) run(bin string, args ...string) string {
	l.t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		l.t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// quiet runs a cleanup command; what is already gone is no error.
func (l *netLab) quiet(bin string, args ...string) {
	exec.Command(bin, args...).Run()
}

// exec returns argv run inside namespace ns (ip netns exec execs it in
// place: the process is argv's command itself).
func (l *netLab) exec(ns string, argv ...string) []string {
	return append([]string{l.ipBin, "netns", "exec", ns}, argv...)
}

// labLeftovers lists the namespaces, links and FORWARD rules of this test
// process's labs that still exist (none once their tests ended).
func labLeftovers(t *testing.T) []string {
	t.Helper()
	ipBin := clustertest.LookTool("ip")
	if ipBin == "" || os.Geteuid() != 0 {
		return nil
	}
	mine := func(s string) bool {
		m := labName.FindStringSubmatch(s)
		return m != nil && m[1] == strconv.Itoa(os.Getpid())
	}
	var left []string
	cmds := [][]string{{ipBin, "netns", "list"}, {ipBin, "-o", "link", "show"}}
	for _, ipt := range clustertest.IptablesTools() {
		cmds = append(cmds, []string{ipt, "-S", "FORWARD"})
	}
	for _, cmd := range cmds {
		out, err := exec.Command(cmd[0], cmd[1:]...).Output()
		if err != nil {
			t.Fatalf("%s: %v", strings.Join(cmd, " "), err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if mine(strings.TrimSuffix(strings.SplitN(f, "@", 2)[0], ":")) {
					left = append(left, line)
					break
				}
			}
		}
	}
	return left
}

var labName = regexp.MustCompile(`^(?:` + labPrefix + `-|tkb|tkv)(\d+)`)

// sweep removes namespaces, bridges and FORWARD rules of labs whose test
// process is gone (killed by a timeout before its cleanup ran).
func (l *netLab) sweep() {
	dead := func(name string) bool {
		m := labName.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() {
			return false
		}
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	out, _ := exec.Command(l.ipBin, "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && dead(f[0]) {
			l.quiet(l.ipBin, "netns", "del", f[0])
		}
	}
	out, _ = exec.Command(l.ipBin, "-o", "link", "show", "type", "bridge").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && dead(strings.TrimSuffix(f[1], ":")) {
			l.quiet(l.ipBin, "link", "del", strings.TrimSuffix(f[1], ":"))
		}
	}
	for _, ipt := range clustertest.IptablesTools() {
		out, _ = exec.Command(ipt, "-S", "FORWARD").Output()
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 8 && f[0] == "-A" && f[2] == "-i" && dead(f[3]) {
				l.quiet(ipt, append([]string{"-D"}, f[1:]...)...)
			}
		}
	}
}

// dial connects from the client namespace: the socket is made on a thread
// moved into that namespace (a socket stays in the namespace it was made
// in), then the thread moves back.
func (l *netLab) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	type dialed struct {
		c   net.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		runtime.LockOSThread()
		root, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- dialed{nil, err}
			return
		}
		defer root.Close()
		if err := unix.Setns(int(l.clientNSFile.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- dialed{nil, fmt.Errorf("setns %s: %w", l.clientNS, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if unix.Setns(int(root.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else the thread stays locked and ends with this goroutine
		ch <- dialed{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// faultTable is the nftables table that holds a node's drops.
const faultTable = "tckclk_fault"

// cut drops, inside node i's namespace, the packets it receives from
// (in) and sends to (out) the other nodes; the clients still reach it.
func (l *netLab) cut(i int, in, out bool) { l.drop(i, in, out, "") }

// lose drops pct % of the packets between node i and the other nodes, both
// ways (nftables numgen: loss without netem).
func (l *netLab) lose(i, pct int) {
	l.drop(i, true, true, fmt.Sprintf("numgen random mod 100 < %d ", pct))
}

// drop installs node i's fault table: packets from / to the other nodes
// that also match cond (nftables, "" for all) are dropped.
func (l *netLab) drop(i int, in, out bool, cond string) {
	l.t.Helper()
	var peers []string
	for j, a := range l.addrs {
		if j != i {
			peers = append(peers, a)
		}
	}
	set := "{ " + strings.Join(peers, ", ") + " }"
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", faultTable)
	if in {
		fmt.Fprintf(&b, "  chain input { type filter hook input priority 0; policy accept; ip saddr %s %sdrop; }\n", set, cond)
	}
	if out {
		fmt.Fprintf(&b, "  chain output { type filter hook output priority 0; policy accept; ip daddr %s %sdrop; }\n", set, cond)
	}
	b.WriteString("}\n")
	cmd := exec.Command(l.ipBin, "netns", "exec", l.nodeNS[i], l.nftBin, "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("nft in %s: %v\n%s\n%s", l.nodeNS[i], err, out, b.String())
	}
}

// hasNetem reports whether the kernel has the netem qdisc (sch_netem;
// some VM kernels lack it), trying it on the client namespace's loopback.
func (l *netLab) hasNetem() bool {
	if exec.Command(l.tcBin, "-n", l.clientNS, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms").Run() != nil {
		return false
	}
	l.quiet(l.tcBin, "-n", l.clientNS, "qdisc", "del", "dev", "lo", "root")
	return true
}

// netem adds a netem qdisc (delay, loss: tc's words) on node i's link.
func (l *netLab) netem(i int, spec ...string) {
	l.t.Helper()
	l.run(l.tcBin, append([]string{"-n", l.nodeNS[i], "qdisc", "add", "dev", "eth0", "root", "netem"}, spec...)...)
}

// heal removes node i's drops and qdisc.
func (l *netLab) heal(i int) {
	l.quiet(l.ipBin, "netns", "exec", l.nodeNS[i], l.nftBin, "delete", "table", "inet", faultTable)
	l.quiet(l.tcBin, "-n", l.nodeNS[i], "qdisc", "del", "dev", "eth0", "root")
}
