//go:build !linux

package clockhealth

import "net"

// KernelRxTimestamps says whether this platform has the kernel receive
// timestamps Options.KernelRxTimestamps asks for: Linux only.
const KernelRxTimestamps = false

// newStampedConn is never possible here: exchanges use user-space stamps.
func newStampedConn(net.Conn) (stampedConn, bool) { return nil, false }

// holdRxTimestamps has nothing to hold here.
func holdRxTimestamps() {}
