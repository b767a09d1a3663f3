package client

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/tckclk/tckclk/node/api/wire"
)

// ClusterHealth reads GET /v1/cluster/health (SPEC §3.5; client token):
// every voter and standby, the cluster's health and its failure
// tolerance. Any node answers from what it knows, but only the leader
// knows every server's last Raft contact: when the first answer is a
// follower's and the client has other addresses, it asks each of them
// once and keeps the first answer from the leader (the follower's when
// none comes).
func (c *Client) ClusterHealth(ctx context.Context) (*wire.ClusterHealth, error) {
	const path = "/v1/cluster/health"
	h, err := get[wire.ClusterHealth](ctx, c, path, false)
	if err != nil || h.LeaderView || len(c.addrs) == 1 {
		return h, err
	}
	first := c.preferred()
	for k := 1; k < len(c.addrs); k++ {
		i := (first + k) % len(c.addrs)
		raw, _, err, _ := c.attempt(ctx, c.hc, c.addrs[i], http.MethodGet, path, nil, false)
		var lh wire.ClusterHealth
		if err == nil && json.Unmarshal(raw, &lh) == nil && lh.LeaderView {
			return &lh, nil
		}
	}
	return h, nil
}
