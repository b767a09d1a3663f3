// Package workload drives a ticket cluster the way lock users do and
// records every operation into a safety.History: N clients grant, renew
// and release a few hot tickets and many cold ones through
// node/api/client, use each grant to write to an in-memory fencing
// register that rejects stale tokens (Jepsen's lock idea), and now and
// then read a ticket back; with Revokes, an administrator revokes grants
// of the hot tickets (SPEC §4).
//
// Every time comes from Config.Clock, which must also be the clients'
// clock (client.WithClock), so call, return and client-side deadline are
// instants on one clock. Run returns when its context ends; every
// goroutine it starts has ended by then.
package workload
