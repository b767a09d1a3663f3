package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/tckclk/tckclk/agent"
	"github.com/tckclk/tckclk/internal/sdnotify"
)

// notifyReadiness reports the agent's /readyz to systemd for the Type=notify
// unit (deploy/systemd/tckclk-agent.service): READY=1 the first time the
// agent is synced (a bound port alone is not ready), STATUS= when the
// selected source or synced state changes (checked every 500 ms), and
// STOPPING=1 when ctx ends. It returns once ctx ended or a has stopped.
// Without $NOTIFY_SOCKET it returns at once.
func notifyReadiness(ctx context.Context, a *agent.Agent, log *slog.Logger, stopped <-chan struct{}) {
	n, err := sdnotify.FromEnv()
	if err != nil {
		log.Warn("not notifying systemd", "err", err)
		return
	}
	if n == nil {
		return
	}
	select {
	case <-a.Ready():
	case <-ctx.Done():
		return
	case <-stopped:
		return
	}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		st := a.Status()
		if st.Ready {
			err = n.Ready("synced from " + st.Selected)
		} else {
			err = n.Status("not ready: synced=0, no healthy source")
		}
		if err != nil {
			log.Warn("sd_notify failed", "err", err)
		}
		select {
		case <-ctx.Done():
			_ = n.Stopping("stopping: finishing exchanges in flight")
			return
		case <-stopped:
			return
		case <-t.C:
		}
	}
}
