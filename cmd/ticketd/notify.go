package main

import (
	"log/slog"

	"github.com/tckclk/tckclk/internal/sdnotify"
	"github.com/tckclk/tckclk/node/api/wire"
)

// notifyReadiness turns the node's /readyz document into sd_notify
// messages for a Type=notify unit (deploy/systemd/ticketd.service):
// READY=1 the first time /readyz says ok — or hold_off, the deliberate
// 250 s + Δ refusal after a FAILED clock, so systemd does not kill a node
// for doing what SPEC §4 asks — STATUS= with the stage and reason on every
// change, STOPPING=1 at stop. nil without $NOTIFY_SOCKET.
func notifyReadiness(log *slog.Logger) func(wire.Health) {
	n, err := sdnotify.FromEnv()
	if err != nil {
		log.Warn("not notifying systemd", "err", err)
		return nil
	}
	if n == nil {
		return nil
	}
	return func(h wire.Health) {
		var err error
		switch {
		case h.Stage == "stopping":
			err = n.Stopping("stopping")
		case h.Status == "ok" || h.Stage == "hold_off":
			err = n.Ready(statusLine(h))
		default:
			err = n.Status(statusLine(h))
		}
		if err != nil {
			log.Warn("sd_notify failed", "err", err)
		}
	}
}

func statusLine(h wire.Health) string {
	if h.Status == "ok" {
		return "ready"
	}
	s := h.Stage
	if h.Reason != "" {
		s += ": " + h.Reason
	}
	if h.Detail != "" {
		s += " (" + h.Detail + ")"
	}
	return s
}
