// Package mesh is the cluster's authenticated internode mesh (SPEC §5
// "Mesh"): one TCP connection per peer pair, optionally inside mutual TLS,
// authenticated by an ed25519 + gossip-secret handshake, then multiplexed
// with yamux into streams whose first byte names their Class (Raft,
// forwarding, bootstrap). Raft runs on it through NewStreamLayer.
//
// Use: m, err := Listen(Config{…}) → advertise m.Addr() in gossip →
// m.Listener(ClassX).Accept() on the serving side, m.Dial(ctx, addr, id,
// ClassX) on the calling side → m.Close().
//
// Handshake (frames in frame.go, flow in session.go): each side sends a
// versioned hello (NodeId, advertised address, fresh 32-byte nonce from
// Config.Rand, public key); the transcript binds a label, both hellos and
// their order (dialer first); each side sends HMAC-SHA-256 over role ||
// transcript, keyed by HMAC(gossip secret, "tckclk mesh handshake v1"), and
// an ed25519 signature over role || transcript. The peer's key must equal
// its trust-map entry and the key it advertises in gossip.
//
// Invariants:
//   - No stream is served before both sides verified each other; any
//     failure closes the connection, is logged with the peer's address,
//     the id it claimed and the reason, and counted in
//     mesh_handshakes_total{result}. Secret bytes are never logged.
//   - A frame body is at most MaxFrame bytes; a larger length prefix, a
//     malformed frame, no first byte within Config.FirstByteTimeout or a
//     handshake past Config.HandshakeTimeout drops that connection only.
//   - At most 64 inbound handshakes run at once, at most 8 from one
//     source (IPv4 address, IPv6 /64). A new connection always gets a
//     place: the least advanced (no byte sent first), then oldest,
//     handshake of its source (or of the busiest source) gives way and
//     is counted as busy (admission.go). Refusal log lines are
//     rate-limited per direction and reason (internal/lograte); the
//     counters count every one.
//   - A reflected proof fails (roles are in the MAC and the signature); a
//     replayed one fails (the other side's nonce is fresh).
//   - At most one session per peer is in use. When both sides dial at once
//     both ends keep the same one (see decide); a session that loses is
//     closed, and a Dial whose session closed before it opened its stream
//     retries once on the survivor.
//   - Every goroutine (accept loop, handshakes, per-session and per-stream
//     servers) belongs to the Mesh; Close ends them all and waits.
//
// Hazards: a stream already handed out on a session that then loses a
// simultaneous-dial tie-break is reset; callers must treat stream errors
// as retryable (Raft's transport does). A peer restarting on a new address
// is found again by its id (Dial with wantID), not by its old address.
// Config.Advertised nil skips the gossip check: only for tests.
package mesh
