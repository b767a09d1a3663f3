package clockhealthtest

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/tckclk/tckclk/protocol"
)

// PipeDialer is a Dialer whose connections are in-process net.Pipe fakes:
// the far end reads the request line, asks Respond for the bytes to send,
// writes them and closes (EOF). Wait blocks until every far end is done.
type PipeDialer struct {
	// Respond gets the parsed request (ok false if it was malformed) and
	// returns the agent's bytes, verbatim.
	Respond func(req protocol.Request, ok bool) []byte
	// Hold keeps the far end open after writing (the client then times out).
	Hold bool
	wg   sync.WaitGroup
}

// DialContext returns the near end of a fresh pipe.
func (d *PipeDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	near, far := net.Pipe()
	d.wg.Go(func() {
		defer far.Close()
		_ = far.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := protocol.NewLineReader(far).ReadLine()
		var req protocol.Request
		ok := false
		if err == nil {
			req, err = protocol.ParseRequest(line)
			ok = err == nil
		}
		if _, err := far.Write(d.Respond(req, ok)); err != nil {
			return // the client stopped reading (size) or left
		}
		if d.Hold {
			var one [1]byte
			_, _ = far.Read(one[:]) // until the client closes its end
		}
	})
	return near, nil
}

// Wait waits for every far end to finish.
func (d *PipeDialer) Wait() { d.wg.Wait() }
