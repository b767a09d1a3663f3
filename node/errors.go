package node

import (
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
)

// The start-up refusals a command maps to exit codes, re-exported so that
// cmd/ticketd needs node alone.
type (
	// DataError: the data dir's content refuses the start (file and why).
	DataError = datadir.Error
	// RetiredError: the data dir is retired (SPEC §3.4).
	RetiredError = datadir.RetiredError
	// IdentityError: the data dir belongs to another NodeId.
	IdentityError = consensus.IdentityError
)

// ErrRetired matches a retired data dir (SPEC §3.4).
var ErrRetired = datadir.ErrRetired
