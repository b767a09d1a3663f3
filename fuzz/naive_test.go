package fuzz

import (
	"encoding/base64"
	"regexp"
	"strconv"
	"strings"

	"github.com/tckclk/tckclk/protocol"
)

// The naive parser: regular expressions and strconv, written from SPEC §1.2
// and §1.5 without looking at protocol's code paths. It is slow and obvious
// on purpose; the fuzz targets require protocol to agree with it.

var (
	naivePrintable = regexp.MustCompile(`^[\x21-\x7e ]*$`)
	naiveB64       = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	naiveNumber    = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)
	strictB64      = base64.RawURLEncoding.Strict()
)

type naiveResult struct {
	reason protocol.Reason // "" when accepted
	resp   protocol.Response
}

func naiveB64Decode(s string, chars, size int) ([]byte, bool) {
	if len(s) != chars || !naiveB64.MatchString(s) {
		return nil, false
	}
	b, err := strictB64.DecodeString(s)
	if err != nil || len(b) != size {
		return nil, false
	}
	return b, true
}

func naiveUint(s string) (uint64, bool) {
	if !naiveNumber.MatchString(s) {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

// naiveFields applies size → bytes → field count → magic → version.
func naiveFields(line string, want int) ([]string, protocol.Reason) {
	if len(line) > 256 {
		return nil, protocol.ReasonSize
	}
	if !naivePrintable.MatchString(line) {
		return nil, protocol.ReasonFormat
	}
	f := strings.Split(line, " ")
	if len(f) != want {
		return nil, protocol.ReasonFormat
	}
	for _, x := range f {
		if x == "" {
			return nil, protocol.ReasonFormat
		}
	}
	if f[0] != "TCKCLK" {
		return nil, protocol.ReasonFormat
	}
	if f[1] != "2" {
		return nil, protocol.ReasonVersion
	}
	return f, ""
}

func naiveParseRequest(line string) (protocol.Nonce, protocol.Reason) {
	f, r := naiveFields(line, 3)
	if r != "" {
		return protocol.Nonce{}, r
	}
	b, ok := naiveB64Decode(f[2], 22, 16)
	if !ok {
		return protocol.Nonce{}, protocol.ReasonFormat
	}
	return protocol.Nonce(b), ""
}

// naiveParseResponse checks everything up to and including the nonce.
func naiveParseResponse(line string, want protocol.Nonce) naiveResult {
	f, r := naiveFields(line, 8)
	if r != "" {
		return naiveResult{reason: r}
	}
	var resp protocol.Response
	nonce, ok := naiveB64Decode(f[2], 22, 16)
	if !ok {
		return naiveResult{reason: protocol.ReasonFormat}
	}
	resp.Nonce = protocol.Nonce(nonce)
	var ok1, ok2, ok3 bool
	resp.ReferenceUnixMs, ok1 = naiveUint(f[3])
	resp.UncertaintyMs, ok2 = naiveUint(f[4])
	resp.SourceAgeMs, ok3 = naiveUint(f[6])
	if !ok1 || !ok2 || !ok3 || (f[5] != "0" && f[5] != "1") {
		return naiveResult{reason: protocol.ReasonFormat}
	}
	resp.Synced = f[5] == "1"
	mac, ok := naiveB64Decode(f[7], 43, 32)
	if !ok {
		return naiveResult{reason: protocol.ReasonFormat}
	}
	resp.MAC = protocol.MAC(mac)
	if resp.Nonce != want {
		return naiveResult{reason: protocol.ReasonNonce}
	}
	return naiveResult{resp: resp}
}
