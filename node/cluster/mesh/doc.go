// Package mesh is the cluster's authenticated, encrypted internode mesh
// (SPEC §5 "Mesh"): one TCP connection per peer pair, optionally inside
// mutual TLS, authenticated by an ed25519 + gossip-secret handshake,
// sealed record by record with keys only the two ends know, then
// multiplexed with yamux into streams whose first byte names their Class
// (Raft, forwarding, bootstrap). Raft runs on it through NewStreamLayer.
//
// Use: m, err := Listen(Config{…}) → advertise m.Addr() in gossip →
// m.Listener(ClassX).Accept() on the serving side, m.Dial(ctx, addr, id,
// ClassX) on the calling side → m.Close().
//
// Handshake (frames in frame.go, flow in session.go), version 2: each side
// sends a hello (its full NodeId NAME~G — its key is the trust-map entry
// of NAME, identity.TrustName — advertised address, fresh 32-byte nonce from
// Config.Rand, ed25519 public key, ephemeral X25519 key share); the
// transcript binds a label, both hellos and their order (dialer first).
// The dialer proves itself first: HMAC-SHA-256 over role || transcript,
// keyed by HMAC(gossip secret, "tckclk mesh handshake v1"), and an ed25519
// signature over role || transcript. The acceptor checks it and only then
// sends its own proof; a dialer that does not prove itself gets nothing
// after the acceptor's hello. Each side's key must equal its trust-map
// entry and the key it advertises in gossip.
//
// Records (seal.go): after the proofs every byte in each direction is a
// ChaCha20-Poly1305 record under that direction's key (SessionKeys:
// HKDF-SHA-256 over the X25519 secret and the gossip secret, salted with
// the transcript), numbered by an implicit per-direction counter. Sealing
// runs with TLS too: TLS proves only membership of a CA's cluster (one
// certificate may serve every node), the records bind the bytes to the
// two ed25519 identities; the cost is small (BenchmarkMeshStream).
//
// Invariants:
//   - No stream is served before both sides verified each other; any
//     failure closes the connection, is counted in
//     mesh_handshakes_total{result} and logged with the peer's address,
//     the id it claimed and the reason — at most one line per direction
//     and reason per 10 s, then a summary with the count (internal/lograte).
//     Secret bytes are never logged.
//   - Nothing an on-path attacker sends reaches yamux: a record that was
//     changed, injected, replayed, reordered or dropped fails to open, the
//     connection closes with its session, and mesh_records_refused_total
//     counts it. Record numbers are never reused (sealing stops at 2^64).
//     Without an identity key of one end nobody can read a session, even
//     with the gossip secret; the ephemeral shares make recorded sessions
//     unreadable later (forward secrecy).
//   - A handshake frame body is at most MaxFrame bytes; a larger length
//     prefix, a malformed frame, no first byte within
//     Config.FirstByteTimeout or a handshake past Config.HandshakeTimeout
//     drops that connection only.
//   - At most 64 inbound handshakes run at once, at most 8 from one source
//     (IPv4 address, IPv6 /64). A new connection always gets a place: the
//     least advanced (no byte sent comes first), then oldest, handshake of
//     its source, or of the busiest source, gives way and is counted as
//     busy (admission.go). A real peer writes its hello at once, so a
//     flood of idle connections cannot push it out.
//   - A reflected proof fails (roles are in the MAC and the signature); a
//     replayed one fails (the other side's nonce is fresh).
//   - At most one session per peer is in use. When both sides dial at once
//     both ends keep the same one (see decide); a session that loses is
//     closed, and a Dial whose session closed before it opened its stream
//     retries once on the survivor.
//   - Every goroutine (accept loop, handshakes, per-session and per-stream
//     servers) belongs to the Mesh; Close ends them all and waits.
//
// Sessions are kept per NodeId, and a Dial naming a NodeId is served only
// by a peer that authenticated as exactly it: NAME~2 at NAME's old
// address, with NAME's key, never answers for NAME. StreamLayer (Raft)
// always names its server (RaftAddress) and refuses a bare address. The
// NodeId in the hello is a change of the unreleased version 2.
//
// Hazards: a stream already handed out on a session that then loses a
// simultaneous-dial tie-break is reset; callers must treat stream errors
// as retryable (Raft's transport does). A peer restarting on a new address
// is found again by its id (Dial with wantID), not by its old address.
// Nodes speaking handshake version 1 are refused (reason "version"): a
// cluster upgrades to version 2 as a whole. Config.Advertised nil skips
// the gossip check: only for tests. An attacker sharing a peer's source
// address that writes bytes on many connections faster than a handshake
// takes can still make that peer's handshake give way (it retries).
package mesh
