package consensus

import (
	"context"
	"io"
	"log/slog"
	"strings"

	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/ticket"
)

// raftFSM adapts ticket.FSM to raft.BatchingFSM.
type raftFSM struct {
	t     *ticket.FSM
	fence *installFence // nil: nothing watches the log clean-up after an install
}

func (f *raftFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	return f.t.ApplyTerm(l.Index, l.Term, l.Data)
}

func (f *raftFSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	for i, l := range logs {
		out[i] = f.Apply(l)
	}
	return out
}

func (f *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := f.t.Snapshot()
	if err != nil {
		return nil, err
	}
	return &fsmSnapshot{s: s}, nil
}

// Restore is Raft's snapshot install (from a leader, or a user restore). A
// refused snapshot stops the FSM, and the node with it.
func (f *raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := f.t.Restore(rc); err != nil {
		return err
	}
	f.fence.restoreDone()
	return nil
}

// hclogWriter turns the lines of Raft's own logger (hclog's text format,
// "TIME [LEVEL]  raft: message: k=v") into slog records.
type hclogWriter struct{ log *slog.Logger }

func (w *hclogWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		lvl, msg := slog.LevelInfo, line
		if i := strings.Index(line, "["); i >= 0 {
			if j := strings.Index(line[i:], "]"); j > 0 {
				switch line[i+1 : i+j] {
				case "TRACE", "DEBUG":
					lvl = slog.LevelDebug
				case "WARN":
					lvl = slog.LevelWarn
				case "ERROR":
					lvl = slog.LevelError
				}
				msg = strings.TrimSpace(line[i+j+1:])
			}
		}
		for _, name := range []string{"raft: ", "snapshot: "} {
			msg = strings.TrimPrefix(msg, name)
		}
		w.log.Log(context.Background(), lvl, msg)
	}
	return len(p), nil
}
