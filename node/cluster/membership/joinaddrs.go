package membership

import (
	"net"
	"strconv"
	"strings"

	"github.com/tckclk/tckclk/internal/config"
)

// DefaultPort is memberlist's and SPEC §5's gossip port.
const DefaultPort = 7946

// ParseJoinAddrs parses cluster.membership.join_addrs in the seed's
// comma-separated form ("node-1:7946, node-2:7946"). Space around entries
// is trimmed; an entry without a port gets DefaultPort ("node-1" →
// "node-1:7946"; a bare IPv6 literal "::1" → "[::1]:7946"). An empty or
// all-space string is no join addresses (a first node); an empty entry
// ("a:1,,b:1", a trailing comma), an empty host, a host with characters
// outside [A-Za-z0-9.-_] that is not an IP, or a port outside 1..65535 is a
// *config.Error naming the key and the entry's position.
func ParseJoinAddrs(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		addr, err := normalizeJoinAddr(strings.TrimSpace(p))
		if err != nil {
			return nil, config.Errorf(KeyJoinAddrs, "entry %d: %s", i+1, err.Error())
		}
		out = append(out, addr)
	}
	return out, nil
}

type joinAddrError string

func (e joinAddrError) Error() string { return string(e) }

func normalizeJoinAddr(p string) (string, error) {
	if p == "" {
		return "", joinAddrError("empty")
	}
	host, port := p, strconv.Itoa(DefaultPort)
	switch {
	case strings.HasPrefix(p, "[") || strings.Count(p, ":") == 1:
		h, pt, err := net.SplitHostPort(p)
		if err != nil {
			return "", joinAddrError(strconv.Quote(p) + " is not host:port")
		}
		host, port = h, pt
		if !validPort(port) {
			return "", joinAddrError("port " + strconv.Quote(port) + " is not in 1..65535")
		}
	case strings.Contains(p, ":"): // several colons, no brackets: a bare IPv6 literal or garbage
		if net.ParseIP(p) == nil {
			return "", joinAddrError(strconv.Quote(p) + " is not host:port (bracket IPv6 literals: [::1]:7946)")
		}
	}
	if host == "" {
		return "", joinAddrError("empty host")
	}
	if net.ParseIP(host) == nil && !validHostname(host) {
		return "", joinAddrError("host " + strconv.Quote(host) + " is neither an IP nor a host name")
	}
	return net.JoinHostPort(host, port), nil
}

func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
