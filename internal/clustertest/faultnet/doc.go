// Package faultnet is a fault-injecting network for in-process clusters
// (tests and the safety scenarios): directed rules per (from, to) node
// name cut, delay and drop the mesh's TCP streams and memberlist's gossip.
//
// Use (example_test.go has it whole; node/cluster_test.go wires a cluster):
//
//	fn := faultnet.New(42)                          // the seed of every link's RNG
//	meshCfg.WrapListener = func(ln net.Listener) net.Listener {
//		return fn.Listener("n1", ln)            // registers n1's mesh address
//	}
//	meshCfg.Dial = fn.Dialer("n1", nil)             // n1's outbound mesh streams
//	fn.Register("n1", gossipAddr)                   // n1's gossip address
//	memberCfg.Transport = fn.Transport("n1", nt)    // nt: n1's *memberlist.NetTransport
//	fn.Cut("n1", "n2")                              // n1 → n2 only
//	fn.Set("n1", "n3", faultnet.Rule{Delay: 20 * time.Millisecond, Jitter: 5 * time.Millisecond})
//	fn.Isolate("n1")                                // both ways, every other registered node
//	fn.Reset("n1", "n2")                            // end their live streams as a crash's resets do
//	fn.HealAll()
//
// Use one Net for the mesh and another for the gossip to fault one
// without the other (a gossip-only cut, say).
//
// Where a rule applies: on the side that starts the traffic. A stream
// dialed by A to B applies A→B on every Write and B→A on every Read, so
// one dialer-side wrapper controls both directions of the TCP stream; a
// gossip packet from A to B is filtered in A's WriteTo. Accepted streams
// and received packets are passed unchanged (their sender's wrapper
// already applied the rule), so every node of a cluster must be wired
// through the same Net. An address no one registered resolves to the
// name "", which has no rules.
//
// What each rule does:
//   - Cut (one way): stream bytes from→to are held, not lost: they wait
//     in the conn's queue (Write keeps returning until 256 KiB are queued,
//     as a socket buffer fills) and nothing arrives until the link heals;
//     then they arrive in order. That is what a partition does to TCP (the
//     sender retransmits, nothing gets through), so Raft, yamux and
//     memberlist see silence and time out on their own. A new stream
//     between two nodes fails with ErrCut while either direction is cut
//     (a TCP handshake needs both). Gossip packets from→to are dropped.
//   - Delay + Jitter: latency, not a throughput limit. A stream's bytes
//     are due Delay plus a uniform [0, Jitter) (from the link's RNG) after
//     they were written (from→to) or read off the socket (to→from); bytes
//     keep their order, so jitter never reorders a stream. A packet is
//     sent that much later.
//   - Drop: the probability a gossip packet is dropped, drawn from the
//     link's RNG. Streams are reliable (TCP retransmits), so Drop does not
//     touch them; use Cut or Delay there.
//
// Reset is not a rule but an event: every live stream between the two
// nodes ends at once as the kernel ends a dead process's connections (the
// wrapped end reads ECONNRESET, the other EOF, held bytes are lost). With
// Isolate first it stands for a crashed node whose peers see the resets;
// alone, for a connection that broke while both ends live.
//
// A wrapped stream owns two goroutines (one per direction) that end when
// it is closed; Close flushes the bytes still queued for writing (each when
// due; dropped if the link is cut) before closing the socket. Deadlines
// are the wrapper's own and interrupt waits without losing bytes.
//
// Determinism: every directed link has its own RNG seeded from the Net's
// seed and the two names, so the n-th packet on a link gets the same
// verdict in every run with the same seed, whatever other links do.
//
// Hazards: the waits use real time (this is a network, not a clock).
// Close every conn and Shutdown every transport (mesh.Close and
// memberlist do): an unclosed conn keeps its two goroutines, and a delayed
// packet's timer is stopped only by Shutdown.
package faultnet
