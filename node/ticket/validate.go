package ticket

import (
	"fmt"
)

// Limits of SPEC §4.
const (
	MaxNameLen   = 128
	MaxHolderLen = 128
	MinLeaseS    = 1
	MaxLeaseS    = 250
)

// ValidName checks a ticket name: [A-Za-z0-9][A-Za-z0-9._:-]{0,127}.
func ValidName(name string) error {
	if len(name) == 0 {
		return fmt.Errorf("name is empty; it must match [A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("name is %d bytes long; at most %d are allowed", len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum || i > 0 && (c == '.' || c == '_' || c == ':' || c == '-') {
			continue
		}
		if i == 0 {
			return fmt.Errorf("name must start with a letter or digit, not %q", string([]byte{c}))
		}
		return fmt.Errorf("name has %q at byte %d; allowed are A-Z a-z 0-9 . _ : -", string([]byte{c}), i)
	}
	return nil
}

// ValidHolder checks a holder: 1..=128 printable ASCII bytes, 0x20–0x7E
// (SPEC §4: the space is printable; control bytes, DEL and non-ASCII are
// not). Holders are length-prefixed in entries and snapshots, so a space
// needs no escaping there.
func ValidHolder(holder string) error {
	if len(holder) == 0 {
		return fmt.Errorf("holder is empty; it must be 1..=%d printable ASCII characters", MaxHolderLen)
	}
	if len(holder) > MaxHolderLen {
		return fmt.Errorf("holder is %d bytes long; at most %d are allowed", len(holder), MaxHolderLen)
	}
	for i := 0; i < len(holder); i++ {
		if c := holder[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("holder has byte 0x%02x at %d; only printable ASCII 0x20-0x7E (space included) is allowed", c, i)
		}
	}
	return nil
}

// ValidLease checks lease_s ∈ 1..=250 (the u8 lease of SPEC §4).
func ValidLease(leaseS int64) error {
	if leaseS < MinLeaseS || leaseS > MaxLeaseS {
		return fmt.Errorf("lease_s %d is outside %d..=%d", leaseS, MinLeaseS, MaxLeaseS)
	}
	return nil
}

// MaxNodeIDLen is the longest NodeId (cluster.name).
const MaxNodeIDLen = 64

// ValidNodeID checks a NodeId as cluster.name allows it: 1..=64 of letters,
// digits, '-', '_' and '.'.
func ValidNodeID(id string) error {
	if id == "" || len(id) > MaxNodeIDLen {
		return fmt.Errorf("node id is %d bytes; it must be 1..=%d", len(id), MaxNodeIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("node id has byte 0x%02x; use letters, digits, '-', '_' and '.'", c)
		}
	}
	return nil
}
