// Package connlimit admits and sheds the HTTP API's connections so that
// connections which have not authenticated can never keep a client that
// holds a token, nor a readiness probe, from being answered (SPEC §4.1).
//
// A connection starts unauthenticated and becomes authenticated, for the
// rest of its life, when a request on it passes the token check (the
// handler calls MarkAuthenticated with the request's context). At every
// accept, in this order:
//
//   - per source (the remote IPv4 address, or the IPv6 /64): at most
//     PerSource unauthenticated connections; one more evicts that source's
//     own oldest idle connection, else its connection reading a request
//     the longest, so a source crowds out only itself;
//   - the unauthenticated share: at most MaxConns − Reserved
//     unauthenticated connections; one more evicts the oldest idle
//     unauthenticated connection, else the one reading a request longest;
//   - MaxConns in all: one more evicts the oldest idle connection,
//     unauthenticated ones first.
//
// A newcomer for whom nothing can be evicted is closed at once (refused),
// never parked in the listen backlog. A request being served is never cut:
// only idle connections and connections still reading a request (its
// header, or a TLS handshake) are evicted. An unauthenticated connection
// idle for UnauthIdle is closed. Every eviction and refusal is counted
// (api_connections_evicted_total, api_connections_refused_total) and never
// logged one by one: an outsider can cause them.
//
// Hazards: eviction closes idle keep-alive connections, which HTTP allows
// at any moment; a client that sends on one as it closes sees the usual
// keep-alive race. Authenticated connections are evicted only at MaxConns
// and only while idle. The limiter sees HTTP/1.x connections: one request
// at a time per connection (the API offers no HTTP/2).
package connlimit
