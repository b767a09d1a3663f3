package membership

import (
	"strconv"
	"strings"
)

// The software_version field (Meta.Version) is the one field of the
// signed metadata an earlier release reads without judging its content
// (any printable ASCII up to MaxVersionLen bytes): the flags, the format
// version and the layout are strict, so a new field or flag would make
// every earlier release refuse the metadata, and so the node, during a
// rolling upgrade. A node therefore says which log-entry formats it reads
// at the end of its software version: "REVISION+entries.N" (N: the newest
// log-entry version it reads). A release from before this marker sends
// no marker (its Version was empty) and reads entries up to version 3.

// entriesMarker starts the marker in Meta.Version.
const entriesMarker = "+entries."

// SoftwareVersion is Meta.Version for a build of revision rev that reads
// log entries up to version entries: rev (its bytes outside 0x21..0x7e
// made '_', cut to fit) followed by the marker.
func SoftwareVersion(rev string, entries int) string {
	marker := entriesMarker + strconv.Itoa(entries)
	b := []byte(rev)
	for i, c := range b {
		if c < 0x21 || c > 0x7e {
			b[i] = '_'
		}
	}
	if n := MaxVersionLen - len(marker); len(b) > n {
		b = b[:max(n, 0)]
	}
	return string(b) + marker
}

// EntryVersion is the newest log-entry version the node reads, as its
// metadata says (SoftwareVersion's marker), or 0 when it does not say:
// a release from before the marker.
func (m *Meta) EntryVersion() int {
	i := strings.LastIndex(m.Version, entriesMarker)
	if i < 0 {
		return 0
	}
	n, err := strconv.Atoi(m.Version[i+len(entriesMarker):])
	if err != nil || n < 1 || n > 255 {
		return 0
	}
	return n
}
