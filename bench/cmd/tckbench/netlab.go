package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/tckclk/tckclk/internal/clustertest"
)

// netLab is a private network of network namespaces for the lost-machine
// failover: one namespace per node, each joined by a veth pair to a
// bridge in the root namespace. The bridge has the address labHost, so
// this process (the prober, in the root namespace) reaches every node at
// labAddr(i) directly. Losing a machine is its host-side veth going down:
// its packets vanish both ways and nobody's connection is reset, as when
// a machine loses power or its link. Everything is removed by close; what
// a killed run left behind (its pid is in every name) is swept by the
// next lab. Same scheme as cmd/ticketd's netlab_linux_test.go.
type netLab struct {
	ipBin  string
	bridge string
	ns     []string // node i's namespace
	veth   []string // node i's host-side veth
	addrs  []string // node i's address
	undo   []func()
}

// The lab's subnet (cmd/ticketd's tests use 10.77.0.0/24).
const (
	labNet    = "10.79.0"
	labHost   = labNet + ".254"
	labPrefix = "tfo"
)

var labName = regexp.MustCompile(`^` + labPrefix + `(\d+)`)

// newNetLab builds the lab for n nodes; an error says why it cannot (not
// root, no ip).
func newNetLab(n int) (l *netLab, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("network namespaces need root")
	}
	l = &netLab{ipBin: clustertest.LookTool("ip")}
	if l.ipBin == "" {
		return nil, errors.New("ip not installed (Debian package iproute2)")
	}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	l.sweep()
	id := strconv.Itoa(os.Getpid())
	l.bridge = labPrefix + id + "b"
	if err := l.run("link", "add", l.bridge, "type", "bridge"); err != nil {
		return l, err
	}
	l.undo = append(l.undo, func() { l.quiet("link", "del", l.bridge) })
	if err := l.run("addr", "add", labHost+"/24", "dev", l.bridge); err != nil {
		return l, err
	}
	if err := l.run("link", "set", l.bridge, "up"); err != nil {
		return l, err
	}
	// Docker sets the FORWARD policy to DROP, and with br_netfilter bridged
	// frames pass through it: let the lab's bridge forward.
	for _, ipt := range clustertest.IptablesTools() {
		rule := []string{"FORWARD", "-i", l.bridge, "-o", l.bridge, "-j", "ACCEPT"}
		if out, err := exec.Command(ipt, append([]string{"-I"}, rule...)...).CombinedOutput(); err != nil {
			return l, fmt.Errorf("%s -I %s: %w: %s", ipt, strings.Join(rule, " "), err, out)
		}
		l.undo = append(l.undo, func() { _ = exec.Command(ipt, append([]string{"-D"}, rule...)...).Run() })
	}
	for i := range n {
		ns, addr := fmt.Sprintf("%s%sn%d", labPrefix, id, i+1), fmt.Sprintf("%s.%d", labNet, i+1)
		host, peer := fmt.Sprintf("%s%sh%d", labPrefix, id, i), fmt.Sprintf("%s%sp%d", labPrefix, id, i)
		if err := l.run("netns", "add", ns); err != nil {
			return l, err
		}
		l.undo = append(l.undo, func() { l.quiet("netns", "del", ns) })
		for _, args := range [][]string{
			{"link", "add", host, "type", "veth", "peer", "name", peer},
			{"link", "set", peer, "netns", ns},
			{"link", "set", host, "master", l.bridge, "up"},
			{"-n", ns, "link", "set", peer, "name", "eth0"},
			{"-n", ns, "addr", "add", addr + "/24", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		} {
			if err := l.run(args...); err != nil {
				return l, err
			}
		}
		l.undo = append(l.undo, func() { l.quiet("link", "del", host) })
		l.ns, l.veth, l.addrs = append(l.ns, ns), append(l.veth, host), append(l.addrs, addr)
	}
	return l, nil
}

func (l *netLab) run(args ...string) error {
	if out, err := exec.Command(l.ipBin, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (l *netLab) quiet(args ...string) { _ = exec.Command(l.ipBin, args...).Run() }

// wrap is argv run inside node i's namespace (ip netns exec execs it in
// place: the process is argv's command itself, so kill -9 reaches it).
func (l *netLab) wrap(i int, argv []string) []string {
	return append([]string{l.ipBin, "netns", "exec", l.ns[i]}, argv...)
}

// cut loses node i's machine: its link goes down, nothing is reset.
func (l *netLab) cut(i int) error { return l.run("link", "set", l.veth[i], "down") }

// mend brings node i's link back (before the next trial's cluster).
func (l *netLab) mend(i int) error { return l.run("link", "set", l.veth[i], "up") }

// close removes everything the lab made, newest first.
func (l *netLab) close() {
	for i := len(l.undo) - 1; i >= 0; i-- {
		l.undo[i]()
	}
	l.undo = nil
}

// sweep removes the namespaces and links of labs whose process is gone.
func (l *netLab) sweep() {
	dead := func(name string) bool {
		m := labName.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, _ := strconv.Atoi(m[1])
		return pid != os.Getpid() && syscall.Kill(pid, 0) != nil
	}
	if out, err := exec.Command(l.ipBin, "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && dead(f[0]) {
				l.quiet("netns", "del", f[0])
			}
		}
	}
	if out, err := exec.Command(l.ipBin, "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name := strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":")
			if dead(name) {
				l.quiet("link", "del", name)
				for _, ipt := range clustertest.IptablesTools() {
					_ = exec.Command(ipt, "-D", "FORWARD", "-i", name, "-o", name, "-j", "ACCEPT").Run()
				}
			}
		}
	}
}
