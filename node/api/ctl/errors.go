package ctl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/tckclk/tckclk/node/api/client"
)

// describeErr renders an error of a call for a person: the server's answer,
// or, when ticketd could not be reached, which address and what to check
// (once, not the URL of each layer of the error).
func describeErr(err error, addr string) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		switch ce.ErrorBody.Error {
		case "held":
			return fmt.Sprintf("held by %q with token %d (%d)", ce.Holder, ce.Token, ce.StatusCode)
		case "unavailable":
			s := fmt.Sprintf("unavailable (%d): %s", ce.StatusCode, ce.Message)
			if ce.Stage != "" {
				s += " [stage " + ce.Stage + "]"
			}
			return s
		}
		return fmt.Sprintf("%s (%d): %s", ce.ErrorBody.Error, ce.StatusCode, ce.Message)
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err.Error()
	}
	reason := ue.Err.Error()
	var oe *net.OpError
	var de *net.DNSError
	switch {
	case ue.Timeout():
		reason = "no answer within --timeout"
	case errors.As(err, &de):
		reason = "cannot resolve " + de.Name
	case errors.As(err, &oe) && oe.Err != nil:
		reason = oe.Err.Error() // "connect: connection refused", without the dial's addresses
	}
	where := "at " + addr
	if strings.Contains(addr, ",") {
		where = "at any of " + addr
	}
	if errors.Is(err, client.ErrOutcomeUnknown) {
		return fmt.Sprintf("no answer from ticketd %s (%s): the request was sent and may have been applied; read the ticket before trying again", where, reason)
	}
	return fmt.Sprintf("cannot reach ticketd %s (%s); check that ticketd runs there, or set --addr or %s", where, reason, envAddr)
}
