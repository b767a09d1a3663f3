package faultnet_test

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tckclk/tckclk/internal/clustertest/faultnet"
	"github.com/tckclk/tckclk/node/cluster/membership"
	"github.com/tckclk/tckclk/node/cluster/mesh"
)

// Wiring one node, n1, of an in-process cluster; every other node is
// wired the same way through the same two nets.
func Example() {
	meshNet, gossipNet := faultnet.New(1), faultnet.New(2)

	var meshCfg mesh.Config
	meshCfg.WrapListener = func(ln net.Listener) net.Listener { return meshNet.Listener("n1", ln) }
	meshCfg.Dial = meshNet.Dialer("n1", nil)

	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	port := nt.GetAutoBindPort()
	gossipNet.Register("n1", net.JoinHostPort("127.0.0.1", fmt.Sprint(port)))
	memberCfg := membership.DefaultConfig()
	memberCfg.Transport = gossipNet.Transport("n1", nt)
	memberCfg.AdvertiseAddr, memberCfg.AdvertisePort = "127.0.0.1", port

	// Faults, by name, at any time:
	meshNet.Cut("n1", "n2") // n1's mesh bytes to n2 are held; n2 → n1 flows
	meshNet.Set("n1", "n3", faultnet.Rule{Delay: 20 * time.Millisecond, Jitter: 5 * time.Millisecond})
	gossipNet.Isolate("n1") // gossip only, both ways
	meshNet.HealAll()
	gossipNet.HealAll()

	_ = memberCfg.Transport.Shutdown() // memberlist does this when it owns it
	fmt.Println(gossipNet.Name(net.JoinHostPort("127.0.0.1", fmt.Sprint(port))))
	// Output: n1
}
