package workload

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/tckclk/tckclk/node/api/client"
	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/safety"
)

// An op the client sent, lost the answer of and tried again elsewhere
// (SPEC §4.1) may have applied, whatever its last attempt said: a dial
// error or a 503 with a readiness stage alone is a refusal, the same
// wrapped in client.ErrOutcomeUnknown is not.
func TestClassifyOutcomeUnknown(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	notReady := &client.Error{StatusCode: 503, ErrorBody: wire.ErrorBody{Error: "unavailable", Stage: "raft", Reason: "no_leader"}}
	for _, c := range []struct {
		err  error
		want safety.Outcome
	}{
		{dial, safety.Refused},
		{notReady, safety.Refused},
		{fmt.Errorf("%w: %w", client.ErrOutcomeUnknown, dial), safety.Unknown},
		{fmt.Errorf("%w: %w", client.ErrOutcomeUnknown, notReady), safety.Unknown},
	} {
		if got, code := classify(c.err); got != c.want {
			t.Errorf("%v: %v (%s), want %v", c.err, got, code, c.want)
		}
	}
}
