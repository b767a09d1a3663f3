package ticket

import "io"

// ScanSnapshot decodes and verifies a whole snapshot as ReadSnapshot does
// and returns its head (no Tickets) with the ticket count, holding no
// ticket in memory: for a node that serves a snapshot file it has on disk
// (a backup, SPEC §3.4) and must not send one it could not restore.
func ScanSnapshot(r io.Reader) (*Snapshot, uint64, error) {
	var n uint64
	s, err := readSnapshot(r, func(Ticket, uint64) { n++ })
	if err != nil {
		return nil, 0, err
	}
	return s, n, nil
}
