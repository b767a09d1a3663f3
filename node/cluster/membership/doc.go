// Package membership is the cluster's gossip membership (SPEC §5
// "Membership"): hashicorp/memberlist, always encrypted, filtered by the
// trust map, with the node-metadata codec, join with back-off, rejoin of an
// isolated node, membership events and the gossip metrics.
//
// Use: LoadSecret and ParseJoinAddrs at config time → New(Config) →
// Start → read Members, AdvertisedKey, HealthScore and Events; call
// UpdateMeta after this node's metadata changed → Leave(timeout) → Close.
//
// Invariants:
//   - Gossip is encrypted with the shared key and verified both ways
//     (Keyring, GossipVerifyIncoming/Outgoing); there is no plaintext mode.
//   - A peer enters this node's view only when its name is in the trust
//     map, its metadata decodes, and the key it advertises is the trusted
//     one (AliveDelegate); a join merge with no trusted live peer is refused
//     (MergeDelegate). Refusals are counted (gossip_refused_total{reason})
//     and logged once per peer, address and reason. Members and
//     AdvertisedKey check the trust map again at read time.
//   - Metadata is Encode/Decode's version-1 format, ≤ 512 bytes, decoded
//     strictly; Decode never panics, and encode(decode(x)) == x.
//   - memberlist's callbacks never block and never call back into
//     memberlist: events go into a bounded channel that drops the oldest.
//   - Every goroutine this package starts (the join loop) ends in Close;
//     memberlist's own end with its Shutdown, which Close calls.
//   - Scheduling uses the injected Clock; memberlist's failure detector
//     keeps its own real-time timers.
//
// Hazards:
//   - Gossip metadata is authenticated by the shared gossip key only: the
//     ed25519 proof of identity is the mesh handshake's, which must check
//     the signature against both the trust map and AdvertisedKey.
//   - memberlist v0.5.4 does not expose suspicion: a suspect member is
//     reported alive until it is declared dead (StateSuspect exists for the
//     metric's shape and stays unused). "left" versus "failed" relies on the
//     Leaving flag that Leave broadcasts before memberlist's leave message;
//     a peer that leaves without it is reported failed.
//   - A node restarted at a new address is accepted there only once its old
//     address was declared dead and Timing.DeadNodeReclaimTime passed (or at
//     once after a graceful Leave); until then memberlist logs a conflict.
//   - An untrusted node may still see trusted nodes (they answer its pings
//     and send their state when it joins); it is never in their views.
//   - A trust-map reload does not evict a member memberlist already holds;
//     Members and AdvertisedKey hide it, memberlist keeps gossiping it until
//     it dies.
package membership
