package ctl

import (
	"net"
	"strings"
	"testing"
)

// closedAddr is an address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close()
	return addr
}

// SPEC §4.1: TICKETCTL_ADDR and --addr take several addresses; ticketctl
// moves past one that cannot serve (here: nothing listens) and reaches
// the node behind it. With none reachable it names them all.
func TestSeveralAddresses(t *testing.T) {
	addr, _ := startNode(t)
	down := closedAddr(t)
	env := map[string]string{"TICKETCTL_ADDR": down + "," + addr, "TICKETCTL_HOLDER": "alice"}
	r := runCtl(t, env, "grant", "multi", "--lease", "30", "--holder", "alice")
	if r.code != 0 || !strings.Contains(r.out, "token") {
		t.Fatalf("grant with TICKETCTL_ADDR=%s: %+v", env["TICKETCTL_ADDR"], r)
	}
	r = runCtl(t, nil, "--addr", down+", "+addr, "get", "multi")
	if r.code != 0 || !strings.Contains(r.out, "multi  alice") {
		t.Fatalf("get with --addr %s,%s: %+v", down, addr, r)
	}
	other := closedAddr(t)
	r = runCtl(t, nil, "--addr", down+","+other, "--timeout", "1s", "status")
	if r.code != 1 || !strings.Contains(r.stderr, "cannot reach ticketd at any of "+down+","+other) {
		t.Fatalf("none reachable: %+v", r)
	}
	for _, bad := range []string{addr + ",", addr + "," + addr, "ftp://x:1," + addr} {
		if r = runCtl(t, nil, "--addr", bad, "status"); r.code != 2 || !strings.Contains(r.stderr, "--addr") {
			t.Errorf("--addr %q: %+v, want exit 2 naming --addr", bad, r)
		}
	}
}
