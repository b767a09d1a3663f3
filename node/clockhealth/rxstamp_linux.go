//go:build linux

package clockhealth

import (
	"encoding/binary"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// KernelRxTimestamps says whether this platform has the kernel receive
// timestamps Options.KernelRxTimestamps asks for (Linux: SO_TIMESTAMPNS_NEW).
const KernelRxTimestamps = true

// linuxStampedConn reads a TCP connection with recvmsg through its RawConn
// (the runtime's poller still waits and honours the connection's
// deadlines) and keeps the SCM_TIMESTAMPNS_NEW stamp of each read.
type linuxStampedConn struct {
	rc    syscall.RawConn
	c     net.Conn // for its addresses in errors
	oob   [64]byte
	stamp int64
}

// newStampedConn turns SO_TIMESTAMPNS_NEW on for c (before the request is
// written, so the answer's segments are stamped) and returns its reader.
// ok is false when c is not a socket or the kernel refuses the option
// (before Linux 5.1): the exchange then reads c itself.
func newStampedConn(c net.Conn) (stampedConn, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS_NEW, 1)
	}); err != nil || serr != nil {
		return nil, false
	}
	return &linuxStampedConn{rc: rc, c: c}, true
}

// Read is one recvmsg of up to len(p) bytes: io.EOF at the end of the
// stream, a timeout error once the connection's deadline passed.
func (s *linuxStampedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n, oobn int
	var rerr error
	err := s.rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, rerr = unix.Recvmsg(int(fd), p, s.oob[:], 0)
			if rerr != unix.EINTR {
				return rerr != unix.EAGAIN
			}
		}
	})
	s.stamp = 0
	switch {
	case err != nil: // the deadline or a closed connection (a *net.OpError, "raw-read")
		return 0, err
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: s.c.LocalAddr(), Addr: s.c.RemoteAddr(), Err: os.NewSyscallError("recvmsg", rerr)}
	case n == 0:
		return 0, io.EOF
	}
	s.stamp = parseStamp(s.oob[:oobn])
	return n, nil
}

// LastStamp is the previous Read's receive timestamp in Unix ns (0: none).
func (s *linuxStampedConn) LastStamp() int64 { return s.stamp }

// parseStamp finds the SCM_TIMESTAMPNS_NEW control message (a
// __kernel_timespec: two 64-bit fields) in oob; 0 when there is none.
func parseStamp(oob []byte) int64 {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SO_TIMESTAMPNS_NEW || len(m.Data) < 16 {
			continue
		}
		sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
		nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
		if sec <= 0 || nsec < 0 || nsec >= 1e9 || sec >= math.MaxInt64/int64(1e9) {
			return 0
		}
		return sec*1e9 + nsec
	}
	return 0
}

// holdRxTimestamps keeps the kernel's receive timestamping on for the
// process's life (New calls it when Options.KernelRxTimestamps is set). The
// kernel stamps received packets only while some socket asks for it, and
// turns that on for the first one through deferred work: without a socket
// holding it on, each exchange's socket would turn it on just before its
// answer arrives (in time or not) and off again when it closes. One
// unbound UDP socket with SO_TIMESTAMPNS_NEW, never read, holds it on.
// Without it (no socket to be had) exchanges still work: an unstamped answer
// falls back to user-space stamps.
func holdRxTimestamps() {
	holdOnce.Do(func() {
		if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS_NEW, 1) // fd stays open for the process's life
		}
	})
}

var holdOnce sync.Once
