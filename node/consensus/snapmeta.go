package consensus

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/tckclk/tckclk/node/datadir"
	"github.com/tckclk/tckclk/node/ticket"
)

// Raft's metadata of a snapshot (meta.json; an InstallSnapshot request)
// says at which index and term it was taken and under which configuration,
// and Raft believes it: a changed digit in it makes a node serve an old
// state as a newer one (the meta.json case of TestDataDirFaultTable). Its
// CRC covers only state.bin. So every snapshot this node writes carries
// the same claims in its own payload, under the payload's checksum
// (ticket.Position, snapshot version 3), and each is checked against the
// other: at start-up before Raft opens (checkSnapshots) and when a
// snapshot from the leader is finalised (positionSink.Close).

// positionStore wraps Raft's snapshot store: each sink it creates knows
// the position Raft created it with, for Persist to write into the payload
// and for Close to check an installed payload against.
type positionStore struct {
	raft.SnapshotStore
	// fsm is stopped when a snapshot's payload contradicts the metadata
	// it is finalised with (nil: nothing to stop, an offline write).
	fsm *ticket.FSM
	// log is the Raft log: a snapshot ending before it begins is refused
	// (refuseBehindLog; nil: no check, an offline write).
	log raft.LogStore
	// fence learns of every snapshot finalised (nil: an offline write).
	fence *installFence
}

func (s *positionStore) Create(version raft.SnapshotVersion, index, term uint64, conf raft.Configuration, confIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	if err := refuseBehindLog(s.log, index); err != nil {
		return nil, err
	}
	sink, err := s.SnapshotStore.Create(version, index, term, conf, confIndex, trans)
	if err != nil {
		return nil, err
	}
	pos := ticket.Position{Index: index, Term: term, TakenMs: uint64(time.Now().UnixMilli()), ConfigurationIndex: confIndex, Servers: servers(conf)}
	return &positionSink{SnapshotSink: sink, pos: pos, fsm: s.fsm, fence: s.fence}, nil
}

// servers converts a Raft configuration to the payload's form.
func servers(conf raft.Configuration) []ticket.Server {
	out := make([]ticket.Server, len(conf.Servers))
	for i, s := range conf.Servers {
		suffrage := uint8(255) // refused as unknown
		if s.Suffrage >= raft.Voter && s.Suffrage <= raft.Staging {
			suffrage = uint8(s.Suffrage)
		}
		out[i] = ticket.Server{Suffrage: suffrage, ID: string(s.ID), Address: string(s.Address)}
	}
	return out
}

// maxHead bounds what a sink keeps of a payload's head to check it: the
// header with its Raft position (a few hundred bytes for any real
// configuration).
const maxHead = 1 << 20

// positionSink is a snapshot sink that knows the position Raft created it
// with. It keeps the head of what is written, and Close refuses a payload
// whose own position is another (a leader's snapshot whose meta.json was
// changed after it started; anything that is not a snapshot of this
// format), stopping the FSM: a node that cannot trust its leader's
// snapshot must not go on.
type positionSink struct {
	raft.SnapshotSink
	pos    ticket.Position
	fsm    *ticket.FSM
	fence  *installFence
	head   []byte
	closed bool
	err    error
}

func (s *positionSink) Write(b []byte) (int, error) {
	if room := maxHead - len(s.head); room > 0 {
		s.head = append(s.head, b[:min(room, len(b))]...)
	}
	return s.SnapshotSink.Write(b)
}

// Close finalises the snapshot once its head agrees with the position;
// a second call returns the first's result.
func (s *positionSink) Close() error {
	if s.closed {
		return s.err
	}
	s.closed = true
	if err := checkHead(s.head, &s.pos); err != nil {
		_ = s.SnapshotSink.Cancel()
		s.err = fmt.Errorf("consensus: snapshot %s refused: %w", s.ID(), err)
		if s.fsm != nil {
			s.fsm.Stop(&ticket.RestoreError{Err: s.err})
		}
		return s.err
	}
	s.err = s.SnapshotSink.Close()
	if s.err == nil {
		s.fence.noteSnapshot(s.pos.Index, s.pos.Term)
	}
	return s.err
}

func (s *positionSink) Cancel() error {
	s.closed = true
	s.err = errors.New("consensus: snapshot cancelled")
	return s.SnapshotSink.Cancel()
}

// checkHead checks a payload's head against the position its metadata
// claims. A payload from before version 3 (written by a leader of the
// previous release) carries no position: its last command must not be
// after the claimed index, which is all it can say.
func checkHead(head []byte, want *ticket.Position) error {
	hdr, _, err := ticket.ReadSnapshotHeader(bytes.NewReader(head))
	if err != nil {
		return fmt.Errorf("its state is unreadable: %w", err)
	}
	return checkPosition(hdr, want, "the snapshot's metadata")
}

// checkPosition compares a payload's header with the position claimed by
// what (a meta.json, an install request).
func checkPosition(hdr *ticket.Snapshot, want *ticket.Position, what string) error {
	if hdr.Raft == nil {
		if hdr.Index > want.Index {
			return fmt.Errorf("%s claims Index %d, but its state (written before snapshot format 3, without its position) holds commands up to index %d", what, want.Index, hdr.Index)
		}
		return nil
	}
	if field, mine, theirs := hdr.Raft.Mismatch(want); field != "" {
		return fmt.Errorf("%s claims %s %s, but its state (state.bin, under its checksum) was taken at %s %s", what, field, theirs, field, mine)
	}
	return nil
}

type fsmSnapshot struct{ s *ticket.Snapshot }

// Persist writes the state with the position of the sink Raft created for
// it (a positionStore's): the index and term of the last entry the FSM
// applied and the committed configuration, as Raft writes them into
// meta.json.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	return persist(s.s, sink)
}

func persist(snap *ticket.Snapshot, sink raft.SnapshotSink) error {
	ps, ok := sink.(*positionSink)
	if !ok {
		_ = sink.Cancel()
		return fmt.Errorf("consensus: snapshot sink %T does not know its Raft position (not a positionStore's)", sink)
	}
	s := *snap
	s.Raft = &ps.pos
	if _, err := s.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release lets the FSM change its tickets in place again (ticket.Snapshot
// Release): Raft calls it once Persist returned.
func (s *fsmSnapshot) Release() { s.s.Release() }

// diskMeta is a snapshot's meta.json as raft's FileSnapshotStore writes
// and reads it.
type diskMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// fileSnapshotVersion is the only metadata version raft's FileSnapshotStore
// writes (its Create refuses any other).
const fileSnapshotVersion raft.SnapshotVersion = 1

// checkMeta reads snapshot name's meta.json under dir and checks it
// (checkMetaBytes) against itself and state.bin's size.
func checkMeta(dir, name string) (*diskMeta, error) {
	path := filepath.Join(dir, name, "meta.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &datadir.Error{File: path, Err: err}
	}
	state := filepath.Join(dir, name, "state.bin")
	fi, err := os.Stat(state)
	if err != nil {
		return nil, &datadir.Error{File: state, Err: fmt.Errorf("snapshot refused: %w", err)}
	}
	return checkMetaBytes(path, name, b, fi.Size())
}

// checkMetaBytes checks every field of the meta.json b (at path) of
// snapshot name, whose state.bin holds stateSize bytes: it parses as raft
// parses it, with nothing unknown or trailing; ID is name and
// "TERM-INDEX-MS" of its own Term and Index; Version is 1; Index and Term
// are set and 1 ≤ ConfigurationIndex ≤ Index; the configuration is one
// raft accepts (ticket.ValidConfiguration); Peers is the legacy encoding
// of its voters; CRC is a CRC-64 (raft's Open compares it with state.bin);
// Size is stateSize. The payload is checked against it when restored
// (checkPosition).
func checkMetaBytes(path, name string, b []byte, stateSize int64) (*diskMeta, error) {
	bad := func(format string, args ...any) error {
		return &datadir.Error{File: path, Err: fmt.Errorf("damaged snapshot metadata: "+format+"; refusing to start; see docs/data-dir.md", args...)}
	}
	var m diskMeta
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, bad("unreadable: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, bad("more follows its JSON object")
	}
	var term, index, ms uint64
	if n, err := fmt.Sscanf(m.ID, "%d-%d-%d", &term, &index, &ms); err != nil || n != 3 || m.ID != fmt.Sprintf("%d-%d-%d", term, index, ms) {
		return nil, bad("ID %q is not TERM-INDEX-MS", m.ID)
	}
	switch {
	case m.ID != name:
		return nil, bad("ID %q is not its directory's name %q", m.ID, name)
	case term != m.Term || index != m.Index:
		return nil, bad("Term %d and Index %d are not the %d and %d of its ID %q", m.Term, m.Index, term, index, m.ID)
	case m.Version != fileSnapshotVersion:
		return nil, bad("Version %d (raft's file snapshot store writes %d)", m.Version, fileSnapshotVersion)
	case m.Index == 0 || m.Term == 0:
		return nil, bad("Index %d, Term %d", m.Index, m.Term)
	case m.ConfigurationIndex == 0 || m.ConfigurationIndex > m.Index:
		return nil, bad("ConfigurationIndex %d is outside 1..=%d (its Index)", m.ConfigurationIndex, m.Index)
	case len(m.CRC) != 8:
		return nil, bad("CRC of %d bytes (a CRC-64 has 8)", len(m.CRC))
	case m.Size != stateSize:
		return nil, bad("Size %d, but state.bin holds %d bytes", m.Size, stateSize)
	}
	if err := ticket.ValidConfiguration(servers(m.Configuration)); err != nil {
		return nil, bad("Configuration: %v", err)
	}
	if err := checkPeers(m.Configuration, m.Peers); err != nil {
		return nil, bad("Peers is not the encoding of its configuration's voters (%v)", err)
	}
	return &m, nil
}

// CheckSnapshotFiles checks one snapshot as a node's start-up does, from
// the bytes of its two files: meta.json (checkMetaBytes), state.bin's
// CRC-64 against it, and state.bin (decoded and verified whole into fsm,
// configured with the node's Δ) against it (checkPosition). name is the
// snapshot's directory. It returns the metadata and the decoded header.
func CheckSnapshotFiles(name string, meta, state []byte, fsm *ticket.FSM) (*raft.SnapshotMeta, *ticket.Snapshot, error) {
	path := filepath.Join(datadir.SnapshotsDir, name, "meta.json")
	m, err := checkMetaBytes(path, name, meta, int64(len(state)))
	if err != nil {
		return nil, nil, err
	}
	statePath := filepath.Join(datadir.SnapshotsDir, name, "state.bin")
	if sum := crc64.Checksum(state, crc64.MakeTable(crc64.ECMA)); binary.BigEndian.Uint64(m.CRC) != sum {
		return nil, nil, &datadir.Error{File: statePath, Err: fmt.Errorf("snapshot refused: %s (the CRC-64 in meta.json is %x, state.bin's is %016x)", errCRC, m.CRC, sum)}
	}
	var hdr *ticket.Snapshot
	if err := restoreChecked(path, statePath, &m.SnapshotMeta, bytes.NewReader(state), fsm, &hdr); err != nil {
		return nil, nil, err
	}
	return &m.SnapshotMeta, hdr, nil
}

// errCRC says what raft's "CRC mismatch" means.
const errCRC = "state.bin does not match the CRC-64 in meta.json (either is damaged)"

// restoreChecked restores the state r of snapshot meta (at metaPath,
// statePath) into fsm once its position is the one meta claims; *hdr is
// set to its header.
func restoreChecked(metaPath, statePath string, meta *raft.SnapshotMeta, r io.Reader, fsm *ticket.FSM, hdr **ticket.Snapshot) error {
	want := metaPosition(meta)
	var mismatch error
	err := fsm.RestoreChecked(r, func(s *ticket.Snapshot) error {
		*hdr = s
		mismatch = checkPosition(s, want, "meta.json")
		return mismatch
	})
	if mismatch != nil {
		return &datadir.Error{File: metaPath, Err: fmt.Errorf("%w: refusing to start (Raft would trust the metadata); see docs/data-dir.md", mismatch)}
	}
	if err != nil {
		return &datadir.Error{File: statePath, Err: err}
	}
	return nil
}

// legacyPeers is raft's deprecated Peers field for conf as raft writes it
// (encodePeers in raft's configuration.go): the voters' transport
// encodings, MessagePack-encoded as raft encodes. Every transport ticketd
// uses (raft's NetworkTransport over the mesh, its in-memory one) encodes
// a peer as its address.
func legacyPeers(conf raft.Configuration) ([]byte, error) {
	var enc [][]byte
	for _, s := range conf.Servers {
		if s.Suffrage == raft.Voter {
			enc = append(enc, []byte(s.Address))
		}
	}
	var buf bytes.Buffer
	// raft's own handle (raft's encodeMsgPack), so the bytes are raft's.
	h := codec.MsgpackHandle{BasicHandle: codec.BasicHandle{TimeNotBuiltin: true}} //nolint:staticcheck // SA1019: as raft does
	if err := codec.NewEncoder(&buf, &h).Encode(enc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkPeers checks raft's deprecated Peers field against conf's voters.
// Raft encodes each voter's address through the transport (EncodePeer),
// which asks the cluster's ServerAddressProvider: a cluster node's own
// address is bare, another voter's names its NodeId (NodeId@mesh address,
// node/cluster/mesh.RaftAddress), at the address gossip advertises now,
// which may differ from the configuration's. So each element is the
// voter's configured address, or its NodeId, "@" and an address; and
// the field is exactly the encoding of those elements.
func checkPeers(conf raft.Configuration, peers []byte) error {
	want, err := legacyPeers(conf)
	if err != nil {
		return err
	}
	if bytes.Equal(want, peers) {
		return nil
	}
	h := codec.MsgpackHandle{BasicHandle: codec.BasicHandle{TimeNotBuiltin: true}} //nolint:staticcheck // SA1019: as raft does
	var got [][]byte
	if err := codec.NewDecoderBytes(peers, &h).Decode(&got); err != nil {
		return err
	}
	var voters []raft.Server
	for _, s := range conf.Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, s)
		}
	}
	if len(got) != len(voters) {
		return fmt.Errorf("%d peers for %d voters", len(got), len(voters))
	}
	for i, s := range voters {
		g := string(got[i])
		if g == string(s.Address) {
			continue
		}
		if addr, ok := strings.CutPrefix(g, string(s.ID)+"@"); !ok || addr == "" {
			return fmt.Errorf("peer %d is %q, not voter %s (%s)", i, g, s.ID, s.Address)
		}
	}
	var buf bytes.Buffer
	if err := codec.NewEncoder(&buf, &h).Encode(got); err != nil {
		return err
	}
	if !bytes.Equal(buf.Bytes(), peers) {
		return errors.New("not raft's encoding of its elements")
	}
	return nil
}

// newer orders snapshots as raft's store lists them: by term, index, ID.
func newer(a, b *raft.SnapshotMeta) bool {
	if a.Term != b.Term {
		return a.Term > b.Term
	}
	if a.Index != b.Index {
		return a.Index > b.Index
	}
	return a.ID > b.ID
}

// metaPosition is the position a metadata claims.
func metaPosition(m *raft.SnapshotMeta) *ticket.Position {
	return &ticket.Position{Index: m.Index, Term: m.Term, ConfigurationIndex: m.ConfigurationIndex, Servers: servers(m.Configuration)}
}

// checkSnapshotInLog compares a single voter's newest snapshot metadata
// with its log: a single voter's log holds only entries it wrote and
// committed, so where it still holds the snapshot's last entry or its
// configuration entry, they must be what meta.json names. (Not in a
// cluster: a follower's log may keep entries of an old term at indices a
// snapshot from the leader covers.) The only check a metadata of a
// payload before format 3 has beyond itself.
func checkSnapshotInLog(d *datadir.Dir, s logStore, snap *raft.SnapshotMeta) error {
	path := filepath.Join(d.Snapshots(), snap.ID, "meta.json")
	bad := func(format string, args ...any) error {
		return &datadir.Error{File: path, Err: fmt.Errorf("snapshot metadata disagrees with the Raft log: "+format+"; refusing to start; see docs/data-dir.md", args...)}
	}
	var l raft.Log
	if s.GetLog(snap.Index, &l) == nil && l.Term != snap.Term {
		return bad("Term %d at Index %d, the log's entry there has term %d", snap.Term, snap.Index, l.Term)
	}
	if s.GetLog(snap.ConfigurationIndex, &l) != nil {
		return nil
	}
	if l.Type != raft.LogConfiguration {
		return bad("ConfigurationIndex %d, the log's entry there is a %v", snap.ConfigurationIndex, l.Type)
	}
	conf, err := decodeConfiguration(l.Data)
	if err != nil {
		return bad("ConfigurationIndex %d, the log's entry there does not decode: %v", snap.ConfigurationIndex, err)
	}
	logPos := &ticket.Position{Servers: servers(conf)}
	if field, mine, theirs := logPos.Mismatch(&ticket.Position{Servers: servers(snap.Configuration)}); field != "" {
		return bad("%s %s, the log's configuration entry %d has %s", field, theirs, snap.ConfigurationIndex, mine)
	}
	return nil
}

// decodeConfiguration is raft.DecodeConfiguration, which panics on bad
// data, as an error.
func decodeConfiguration(b []byte) (c raft.Configuration, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return raft.DecodeConfiguration(b), nil
}
