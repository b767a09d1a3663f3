package fuzz

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
)

// raftSnapshot writes state as hashicorp/raft's own FileSnapshotStore does
// for a snapshot at pos (an in-memory transport: a peer encodes as its
// address) into a temporary directory, and returns the snapshot's ID and
// the meta.json raft wrote.
func raftSnapshot(pos *ticket.Position, state []byte) (string, []byte, error) {
	dir, err := os.MkdirTemp("", "fuzz-snapmeta-")
	if err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(dir)
	store, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, hclog.NewNullLogger())
	if err != nil {
		return "", nil, err
	}
	var conf raft.Configuration
	for _, s := range pos.Servers {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.ServerSuffrage(s.Suffrage), ID: raft.ServerID(s.ID), Address: raft.ServerAddress(s.Address)})
	}
	_, tr := raft.NewInmemTransport("")
	defer tr.Close()
	sink, err := store.Create(1, pos.Index, pos.Term, conf, pos.ConfigurationIndex, tr)
	if err != nil {
		return "", nil, err
	}
	if _, err := sink.Write(state); err != nil {
		return "", nil, err
	}
	if err := sink.Close(); err != nil {
		return "", nil, err
	}
	meta, err := os.ReadFile(filepath.Join(dir, datadir.SnapshotsDir, sink.ID(), "meta.json"))
	return sink.ID(), meta, err
}

type metaSeed struct{ meta, state []byte }

// snapMetaSeeds are real (meta.json, state.bin) pairs as raft writes them, for
// one voter and for a mixed configuration, a state before format 3 with
// its meta, and the trial's change ("Index":N → "Index":9N).
func snapMetaSeeds() []metaSeed {
	var out []metaSeed
	for i, st := range snapshotSeeds() {
		s, err := ticket.ReadSnapshot(bytes.NewReader(st))
		if err != nil {
			panic(err)
		}
		pos := s.Raft
		if pos == nil { // an old-format state: a position its meta claims
			pos = &ticket.Position{Index: s.Index + 1, Term: 2, ConfigurationIndex: 1, Servers: []ticket.Server{{ID: "node-1", Address: "127.0.0.1:7001"}}}
		}
		_, meta, err := raftSnapshot(pos, st)
		if err != nil {
			panic(err)
		}
		out = append(out, metaSeed{meta, st})
		if i == len(snapshotSeeds())-1 {
			trial := bytes.Replace(meta, fmt.Appendf(nil, `"Index":%d,`, pos.Index), fmt.Appendf(nil, `"Index":9%d,`, pos.Index), 1)
			out = append(out, metaSeed{trial, st})
		}
	}
	return out
}

// FuzzSnapshotMeta: a snapshot's two files, meta.json (which Raft
// trusts) and state.bin, as a node's start-up checks them
// (consensus.CheckSnapshotFiles, SPEC §4). Nothing panics; a refusal names
// one of the two files and restores nothing; a pair is accepted only when
// it is consistent, by an oracle written from raft's file format: the
// JSON reads as raft reads it, its ID is the directory's name and starts
// with its Term and Index, Version 1, Size and CRC-64 those of state.bin,
// Peers the voters' addresses, and state.bin decodes with the same index,
// term, configuration index and configuration (before format 3: no
// command after its Index). And the other way: a valid state of format 3
// with the meta.json raft's own FileSnapshotStore writes for it is always
// accepted.
func FuzzSnapshotMeta(f *testing.F) {
	for _, s := range snapMetaSeeds() {
		f.Add(s.meta, s.state)
	}
	f.Fuzz(func(t *testing.T, meta, state []byte) {
		name := "1-1-1"
		var id struct{ ID string }
		if json.Unmarshal(meta, &id) == nil && id.ID != "" && !strings.ContainsAny(id.ID, "/\x00") {
			name = id.ID
		}
		fsm := ticket.New(500)
		m, hdr, err := consensus.CheckSnapshotFiles(name, meta, state, fsm)
		if err != nil {
			var de *datadir.Error
			if !errors.As(err, &de) || filepath.Base(de.File) != "meta.json" && filepath.Base(de.File) != "state.bin" {
				t.Fatalf("refused without naming meta.json or state.bin: %v", err)
			}
			if fsm.Len() != 0 || fsm.Delta() != 0 {
				t.Fatal("a refused pair restored state")
			}
		} else {
			tickets, err := consistent(name, meta, state)
			if err != nil {
				t.Fatalf("accepted an inconsistent pair: %v\nmeta %s", err, meta)
			}
			if hdr == nil || m.Index != rawIndex(meta) || fsm.Len() != tickets {
				t.Fatalf("accepted: header %v, index %d, %d tickets restored of %d", hdr, m.Index, fsm.Len(), tickets)
			}
		}
		raftWrittenAccepted(t, state)
	})
}

// rawMeta is meta.json as raft's fileSnapshotMeta encodes it.
type rawMeta struct {
	Version       int
	ID            string
	Index, Term   uint64
	Peers         []byte
	Configuration struct {
		Servers []struct {
			Suffrage    int
			ID, Address string
		}
	}
	ConfigurationIndex uint64
	Size               int64
	CRC                []byte
}

func rawIndex(meta []byte) uint64 {
	var m rawMeta
	json.Unmarshal(meta, &m)
	return m.Index
}

// consistent is the oracle: nil when meta and state agree in every field,
// with the number of tickets in state.
func consistent(name string, meta, state []byte) (int, error) {
	var m rawMeta
	if err := json.NewDecoder(bytes.NewReader(meta)).Decode(&m); err != nil { // as raft reads it
		return 0, fmt.Errorf("raft cannot read it: %v", err)
	}
	sum := binary.BigEndian.AppendUint64(nil, crc64.Checksum(state, crc64.MakeTable(crc64.ECMA)))
	switch {
	case m.ID != name:
		return 0, fmt.Errorf("ID %q in directory %q", m.ID, name)
	case !strings.HasPrefix(m.ID, fmt.Sprintf("%d-%d-", m.Term, m.Index)):
		return 0, fmt.Errorf("ID %q for term %d index %d", m.ID, m.Term, m.Index)
	case m.Version != 1:
		return 0, fmt.Errorf("version %d", m.Version)
	case m.Size != int64(len(state)):
		return 0, fmt.Errorf("size %d of %d bytes", m.Size, len(state))
	case !bytes.Equal(m.CRC, sum):
		return 0, fmt.Errorf("CRC %x, state's %x", m.CRC, sum)
	}
	var peers [][]byte
	if err := codec.NewDecoderBytes(m.Peers, &codec.MsgpackHandle{}).Decode(&peers); err != nil {
		return 0, fmt.Errorf("peers: %v", err)
	}
	var voters [][]byte
	for _, s := range m.Configuration.Servers {
		if s.Suffrage == 0 {
			voters = append(voters, []byte(s.Address))
		}
	}
	if len(peers) != len(voters) {
		return 0, fmt.Errorf("%d peers, %d voters", len(peers), len(voters))
	}
	for i := range peers {
		if !bytes.Equal(peers[i], voters[i]) {
			return 0, fmt.Errorf("peer %d %q, voter %q", i, peers[i], voters[i])
		}
	}
	s, err := ticket.ReadSnapshot(bytes.NewReader(state))
	if err != nil {
		return 0, err
	}
	if s.Raft == nil {
		if s.Index > m.Index {
			return 0, fmt.Errorf("commands to %d, meta index %d", s.Index, m.Index)
		}
		return len(s.Tickets), nil
	}
	p := s.Raft
	if p.Index != m.Index || p.Term != m.Term || p.ConfigurationIndex != m.ConfigurationIndex || len(p.Servers) != len(m.Configuration.Servers) {
		return 0, fmt.Errorf("position %+v, meta %+v", p, m)
	}
	for i, sv := range m.Configuration.Servers {
		if int(p.Servers[i].Suffrage) != sv.Suffrage || p.Servers[i].ID != sv.ID || p.Servers[i].Address != sv.Address {
			return 0, fmt.Errorf("server %d: %+v vs %+v", i, p.Servers[i], sv)
		}
	}
	return len(s.Tickets), nil
}

// raftChecked remembers the states raftWrittenAccepted has checked (a
// fuzz worker sees the same state with many metas).
var raftChecked sync.Map

// raftWrittenAccepted: a valid state of format 3 (with this node's Δ),
// with the meta.json raft writes for its position, is accepted.
func raftWrittenAccepted(t *testing.T, state []byte) {
	s, err := ticket.ReadSnapshot(bytes.NewReader(state))
	if err != nil || s.Raft == nil {
		return
	}
	if _, done := raftChecked.LoadOrStore(string(state), true); done {
		return
	}
	id, meta, err := raftSnapshot(s.Raft, state)
	if err != nil {
		t.Fatalf("raft's store could not write it: %v", err)
	}
	if _, _, err := consensus.CheckSnapshotFiles(id, meta, state, ticket.New(s.DeltaMs)); err != nil {
		t.Fatalf("a consistent pair was refused: %v\nmeta %s", err, meta)
	}
}
