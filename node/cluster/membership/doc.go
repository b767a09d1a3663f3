// Package membership is the cluster's gossip membership (SPEC §5
// "Membership"): hashicorp/memberlist, always encrypted, filtered by the
// trust map, with the node-metadata codec, join with back-off, rejoin of an
// isolated node, membership events and the gossip metrics.
//
// Use: LoadSecret and ParseJoinAddrs at config time → New(Config, with the
// identity key that signs this node's metadata) →
// Start → read Members, AdvertisedKey, HealthScore and Events; call
// UpdateMeta after this node's metadata changed → Leave(timeout) → Close.
//
// Invariants:
//   - Gossip is encrypted with the shared key and verified both ways
//     (Keyring, GossipVerifyIncoming/Outgoing); there is no plaintext mode.
//   - A peer enters this node's view only when its name is in the trust
//     map and its metadata is signed by that name's ed25519 identity key,
//     which it advertises (AliveDelegate); a join merge with no trusted live
//     peer is refused (MergeDelegate). Refusals are counted
//     (gossip_refused_total{reason}: untrusted_name, malformed_meta,
//     key_mismatch, foreign_merge; gossip_meta_refused_total{reason}:
//     unsigned, bad_signature, replay, node_id) and logged once per peer,
//     address and reason, at most refusalLogBurst lines per reason in each
//     refusalLogInterval and then a summary with the count
//     (internal/lograte: a gossip-key holder can cause refusals at will).
//     Members and AdvertisedKey check the trust map again at read time.
//   - Metadata is Encode/Decode's version-2 format, ≤ MaxEncodedLen (437)
//     bytes against memberlist's 512, signed over every byte (NodeID and Seq
//     included) under a context string; Decode never panics, verifies
//     against the trust map's key, and encode(decode(x)) == x. Every Meta in
//     Members and Events is one its node's key signed: nothing else puts
//     metadata into the view (SPEC §5 "Identity").
//   - Seq orders one node's metadata. This node signs each change with
//     max(previous+1, wall clock ns, one above any of its own sequences
//     gossip showed it), so it only grows, across restarts too. The view
//     never moves back: a signed metadata newer than the view's is taken
//     even from a message memberlist drops for its incarnation; an older one
//     that memberlist applies (a replay with a forged incarnation) is
//     counted and the newer kept.
//   - memberlist's callbacks never block and never call back into
//     memberlist: events go into a bounded channel that drops the oldest.
//   - Every goroutine this package starts (the join loop) ends in Close;
//     memberlist's own end with its Shutdown, which Close calls.
//   - Scheduling uses the injected Clock; memberlist's failure detector
//     keeps its own real-time timers.
//
// Hazards:
//   - The gossip key lets a holder into the conversation, not into the
//     view: it can read and inject datagrams and forge memberlist's own
//     unsigned claims — alive, suspect, dead, incarnation numbers, gossip
//     addresses — but no metadata. So a member's State (alive, dead, left)
//     is a hint a gossip-key holder can bend, and nothing that changes the
//     replicated state or the voter set may rest on it alone (the
//     reconciler also wants silence in Raft; SPEC §5 "Reconciler"). "Left"
//     versus "failed" rests on the signed Leaving flag. A forged incarnation
//     near 2^32 can keep memberlist from applying a node's later alive
//     messages: the view still takes their signed metadata (advanceMeta),
//     but the liveness state may stay wrong until memberlist forgets the
//     entry.
//   - A peer that never saw a node's metadata (just started) accepts any
//     correctly signed one of it, an older capture too, until the node's
//     next update (each clock sample) supersedes it.
//   - A node whose wall clock went back across a restart by more than the
//     restart took signs below its previous run: peers refuse that as a
//     replay until gossip shows the node its own earlier sequence (an alive
//     message about it while peers still hold it alive), after which its
//     next UpdateMeta signs above. A peer that already declared it dead
//     sends no such message: the node's metadata is then refused until its
//     clock passes the old sequence.
//   - The ed25519 proof of identity on the mesh is the handshake's, which
//     must check the signature against both the trust map and
//     AdvertisedKey (the key in signed metadata).
//   - memberlist v0.5.4 does not expose suspicion: a suspect member is
//     reported alive until it is declared dead (StateSuspect exists for the
//     metric's shape and stays unused). "left" versus "failed" relies on the
//     Leaving flag that Leave broadcasts before memberlist's leave message;
//     a peer that leaves without it is reported failed.
//   - Nodes of the release before signed metadata (format version 1) and
//     nodes of this one refuse each other's metadata (reason unsigned /
//     malformed_meta): they do not see each other in gossip.
//   - A node restarted at a new address is accepted there only once its old
//     address was declared dead and Timing.DeadNodeReclaimTime passed (or at
//     once after a graceful Leave); until then memberlist logs a conflict.
//   - An untrusted node may still see trusted nodes (they answer its pings
//     and send their state when it joins); it is never in their views.
//   - A trust-map reload does not evict a member memberlist already holds;
//     Members and AdvertisedKey hide it, memberlist keeps gossiping it until
//     it dies.
package membership
