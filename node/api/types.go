package api

import (
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/ticket"
)

// TicketFrom converts FSM state to the wire form.
func TicketFrom(t ticket.Ticket) wire.Ticket {
	return wire.Ticket{
		Name: t.Name, Holder: t.Holder, Token: t.Token, LeaseS: t.LeaseS,
		ConservativeValidBeforeUnixMs: t.ValidBeforeMs, ServerExpiryUnixMs: t.ExpiryMs, Revoked: t.Revoked, Waiters: t.Waiters,
	}
}
