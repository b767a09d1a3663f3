// Package sdnotify tells systemd (Type=notify units, sd_notify(3)) when a
// daemon is ready, what it is doing and that it is stopping. Without
// $NOTIFY_SOCKET (not started by systemd) every call is a no-op.
//
// READY=1 is sent once; STATUS= only when the text changed, so a caller can
// report on every state change without flooding the journal.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
)

// Notifier sends datagrams to one notify socket. The zero value and nil
// are valid no-op notifiers.
type Notifier struct {
	addr string

	mu     sync.Mutex
	ready  bool
	status string
}

// FromEnv returns a Notifier for $NOTIFY_SOCKET and unsets the variable so
// no child process inherits it; nil when it is not set.
func FromEnv() (*Notifier, error) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil, nil
	}
	os.Unsetenv("NOTIFY_SOCKET")
	if !strings.HasPrefix(addr, "/") && !strings.HasPrefix(addr, "@") {
		return nil, fmt.Errorf("NOTIFY_SOCKET=%q: not an absolute path or an abstract socket name", addr)
	}
	return &Notifier{addr: addr}, nil
}

// Ready reports that start-up is complete (READY=1, sent once) with a
// status line.
func (n *Notifier) Ready(status string) error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var lines []string
	if !n.ready {
		lines = append(lines, "READY=1")
	}
	if status != n.status {
		lines = append(lines, "STATUS="+oneLine(status))
	}
	if len(lines) == 0 {
		return nil
	}
	if err := n.send(strings.Join(lines, "\n")); err != nil {
		return err
	}
	n.ready, n.status = true, status
	return nil
}

// Status reports what the daemon is doing (STATUS=, only when changed).
func (n *Notifier) Status(status string) error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if status == n.status {
		return nil
	}
	if err := n.send("STATUS=" + oneLine(status)); err != nil {
		return err
	}
	n.status = status
	return nil
}

// Stopping reports that the daemon began its shutdown (STOPPING=1).
func (n *Notifier) Stopping(status string) error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.status = status
	return n.send("STOPPING=1\nSTATUS=" + oneLine(status))
}

func (n *Notifier) send(msg string) error {
	name := n.addr
	if name[0] == '@' {
		name = "\x00" + name[1:] // Linux abstract namespace
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify %s: %w", n.addr, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(msg)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", n.addr, err)
	}
	return nil
}

// oneLine keeps a status to one line (a newline would start a new
// assignment in the datagram).
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}
