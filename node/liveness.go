package node

import (
	"github.com/tckclk/tckclk/node/api/wire"
)

// Liveness is /livez (api.Backend): the clock (a FAILED clock is not live:
// the process must not linger as if it could recover), and in cluster mode
// the gossip health score (after a boot grace) and Raft last contact
// (voters strict, standbys lenient, the leader always passes; a
// gossip-only client has no Raft to judge).
func (n *server) Liveness() wire.Health {
	h := wire.Health{Status: "ok"}
	fail := func(reason, detail string) wire.Health {
		return wire.Health{Status: "unavailable", Reason: reason, Detail: detail}
	}
	if ce := n.clockErr(); ce != nil {
		return fail("clock", ce.Error())
	}
	if reason, detail := n.mode.liveness(); reason != "" {
		return fail(reason, detail)
	}
	return h
}
