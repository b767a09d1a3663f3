// Package peerstatus is the peer-status query a cluster node answers on
// mesh streams of class bootstrap (SPEC §5 Bootstrap, §3.4 replacement): a
// node asks a peer whether it holds Raft state (Consul's maybeBootstrap
// asks every peer before bootstrapping) and how far its log reaches (the
// leader's reconciler promotes a non-voter only once it has caught up).
//
// The request is one byte, Op. The answer is Len bytes, big-endian:
//
//	version u8 (1) | flags u8 (bit 0: has Raft state) | last log index u64 |
//	leader NodeId (u8 length ≤ 128 + bytes; 0: no leader known)
//
// Gossip-only client nodes learn the leader they forward to from it.
//
// A second request, OpRetiredGeneration, asks for the highest retired
// generation of the asker's own name (version u8 | generation u32): a node
// that never joined learns whether its NodeId is retired (SPEC §3.4).
//
// Decode is strict and never panics (FuzzDecode, with a naive oracle).
package peerstatus
