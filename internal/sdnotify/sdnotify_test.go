package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen opens a notify socket like systemd's and returns a reader of its
// datagrams.
func listen(t *testing.T) (string, func() string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return path, func() string {
		t.Helper()
		buf := make([]byte, 4096)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no datagram: %v", err)
		}
		return string(buf[:n])
	}
}

// sd_notify(3): READY=1 exactly once, STATUS= only on change, STOPPING=1;
// a newline in a status cannot inject another assignment.
func TestNotifySequence(t *testing.T) {
	path, read := listen(t)
	t.Setenv("NOTIFY_SOCKET", path)
	n, err := FromEnv()
	if err != nil || n == nil {
		t.Fatalf("FromEnv: %v, %v", n, err)
	}
	if _, set := os.LookupEnv("NOTIFY_SOCKET"); set {
		t.Fatal("NOTIFY_SOCKET still set: a child would inherit it")
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(n.Status("clock_check"))
	if got := read(); got != "STATUS=clock_check" {
		t.Fatalf("got %q", got)
	}
	must(n.Status("clock_check")) // unchanged: nothing sent
	must(n.Ready("ready\nREADY=0"))
	if got := read(); got != "READY=1\nSTATUS=ready READY=0" {
		t.Fatalf("got %q", got)
	}
	must(n.Ready("ready: leader"))
	if got := read(); got != "STATUS=ready: leader" {
		t.Fatalf("second Ready re-sent READY=1 or lost the status: %q", got)
	}
	must(n.Stopping("stopping"))
	if got := read(); got != "STOPPING=1\nSTATUS=stopping" {
		t.Fatalf("got %q", got)
	}
}

func TestNoSocketIsNoop(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n, err := FromEnv()
	if n != nil || err != nil {
		t.Fatalf("FromEnv without a socket: %v, %v", n, err)
	}
	if err := n.Ready("x"); err != nil {
		t.Fatal(err)
	}
	if err := n.Status("x"); err != nil {
		t.Fatal(err)
	}
	if err := n.Stopping("x"); err != nil {
		t.Fatal(err)
	}
}

func TestBadSocketRefused(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "relative/path")
	if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), "NOTIFY_SOCKET") {
		t.Fatalf("relative NOTIFY_SOCKET: %v", err)
	}
}

func TestAbstractSocket(t *testing.T) {
	name := "tckclk-sdnotify-test-" + strings.ReplaceAll(t.Name(), "/", "-")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: "\x00" + name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Setenv("NOTIFY_SOCKET", "@"+name)
	n, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Ready("ok"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	k, err := c.Read(buf)
	if err != nil || string(buf[:k]) != "READY=1\nSTATUS=ok" {
		t.Fatalf("abstract socket: %q, %v", buf[:k], err)
	}
}
