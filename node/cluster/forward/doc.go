// Package forward carries writes and linearizable reads from followers and
// gossip-only client nodes to the leader (SPEC §4.1, §5)
// over a stream the mesh provides (any net.Conn).
//
// Frames: a u32 big-endian length, then at most MaxFrame (64 KiB) of body:
// version (1), kind (request or response), a u64 request id, and the typed
// fields of the op (request) or the code, message, stage, reason,
// holder/token and a ticket or a list of them (response). Decoding is
// strict: unknown version, kind, op, code or body tag, bad string or list
// lengths, booleans other than 0/1 and trailing bytes are ErrMalformed.
//
// Client: one connection at a time, any number of requests in flight on it
// (matched by request id); dialled lazily and again after it breaks.
// Server: per-connection goroutine with idle and per-frame read deadlines,
// a handler goroutine per request bounded by MaxInFlight over all
// connections, Close that waits for every goroutine it started.
//
// Invariants:
//   - a request that was sent but got no answer is ErrOutcomeUnknown, and
//     the Client never resends it; only a request known not to have left
//     (the connection died before the write) is tried once more on a fresh
//     connection;
//   - bad input (garbage, oversize, unknown version, a frame stalled past
//     FrameTimeout) drops that connection, counted in Dropped; the server
//     keeps serving the others.
//
// Hazards: socket deadlines use the system clock (time.Now), not the
// injected one. A Handler must honour its ctx, or Close waits for it. A
// connection idle past IdleTimeout is closed by the server; a request the
// client writes at that same moment comes back as ErrOutcomeUnknown.
package forward
