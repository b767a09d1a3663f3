package node

import (
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/stage"
)

// watchReadiness calls report with Readiness() each time it changes,
// checking every interval, until the returned stop is called; stop reports
// a last time with stage stopping.
func (n *server) watchReadiness(report func(wire.Health), every time.Duration) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		var last wire.Health
		first := true
		for {
			if h := n.Readiness(); first || h != last {
				first, last = false, h
				report(h)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		report(wire.Health{Status: "unavailable", Stage: string(stage.Stopping)})
	}
}
