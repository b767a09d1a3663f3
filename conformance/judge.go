package conformance

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tckclk/tckclk/protocol"
)

// The judges below look at one exchange each. Most read the response
// leniently (fieldsOf), so that each reports on its own requirement and a
// broken line fails the checks it breaks, not all of them; judgeValid (1.2-1)
// applies every rule at once, as a node does.

// responseFields is the number of fields of a response (SPEC §1.2).
const responseFields = 8

// fieldsOf splits a line on any run of blanks after dropping one trailing CR.
func fieldsOf(line []byte) []string {
	return strings.Fields(string(bytes.TrimSuffix(line, []byte{'\r'})))
}

// fields returns at least want lenient fields of the response line, or the
// failure that stands in for the check when there are not that many.
func (x *exchange) fields(want int) ([]string, Outcome, bool) {
	line, why := x.inspectLine()
	if why != "" {
		return nil, fail("nothing to inspect: %s", why), false
	}
	f := fieldsOf(line)
	if len(f) < want {
		return nil, mismatch(fmt.Sprintf("a response of %d fields", responseFields),
			fmt.Sprintf("%d fields in %s", len(f), quote(line))), false
	}
	return f, Outcome{}, true
}

// dur renders a duration for a detail: µs below a millisecond, else 0.1 ms.
func dur(d time.Duration) string {
	if d < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

// explain renders a strict verdict with its SPEC §1.5 reason and the line.
func explain(x *exchange, err error) string {
	reason, _ := protocol.ReasonOf(err)
	s := fmt.Sprintf("reason %s (%v)", reason, err)
	if line, why := x.inspectLine(); why == "" {
		s += " in " + quote(line)
	}
	return s
}

// judgeOneLine: SPEC §1.1, one response line and then EOF.
func judgeOneLine(_ *Target, x *exchange) Outcome {
	if x.end == endConnect {
		return fail("%s", x.describeEnd())
	}
	i := bytes.IndexByte(x.raw, '\n')
	if i < 0 {
		return mismatch("one LF-terminated line, then EOF", "no LF: "+x.describeEnd())
	}
	if extra := x.raw[i+1:]; len(extra) > 0 {
		return mismatch("EOF right after the LF", fmt.Sprintf("%d more bytes: %s", len(extra), quote(extra)))
	}
	if x.end != endEOF {
		return mismatch("EOF within "+x.limit.String(), "the line, then "+x.describeEnd())
	}
	return pass("one line of %d bytes, then EOF %s after the LF", i, dur(x.endAt.Sub(x.lfAt)))
}

// judgeSize: SPEC §1.1, at most 256 bytes before the LF.
func judgeSize(_ *Target, x *exchange) Outcome {
	const want = "at most 256 bytes before the LF"
	i := bytes.IndexByte(x.raw, '\n')
	switch {
	case x.end == endConnect:
		return fail("%s", x.describeEnd())
	case i > protocol.MaxLine:
		return mismatch(want, fmt.Sprintf("the LF after %d bytes", i))
	case i >= 0:
		return pass("%d bytes before the LF", i)
	case len(x.raw) > protocol.MaxLine:
		return mismatch(want, fmt.Sprintf("%d bytes without LF (%s)", len(x.raw), x.describeEnd()))
	case len(x.raw) == 0:
		return fail("no response: %s", x.describeEnd())
	}
	return pass("%d bytes, no LF (see 1.1-3)", len(x.raw))
}

// judgeBytes: SPEC §1.1, printable ASCII ending in one LF, no CR.
func judgeBytes(_ *Target, x *exchange) Outcome {
	line, why := x.inspectLine()
	if why != "" {
		return fail("nothing to inspect: %s", why)
	}
	if bytes.IndexByte(x.raw, '\n') < 0 {
		return mismatch("a line ending in LF", fmt.Sprintf("%s, no LF", x.describeEnd()))
	}
	for j, c := range line {
		switch {
		case c == '\r' && j == len(line)-1:
			return mismatch("a single LF at the end", "CR LF")
		case c == '\r':
			return mismatch("no CR", fmt.Sprintf("CR at offset %d", j))
		case c < 0x20 || c > 0x7e:
			return mismatch("printable ASCII and spaces", fmt.Sprintf("byte 0x%02x at offset %d", c, j))
		}
	}
	return pass("%d printable ASCII bytes and one LF", len(line))
}

// judgeSpaces: SPEC §1.1, single spaces between fields, none at either end.
func judgeSpaces(_ *Target, x *exchange) Outcome {
	line, why := x.inspectLine()
	if why != "" {
		return fail("nothing to inspect: %s", why)
	}
	line = bytes.TrimSuffix(line, []byte{'\r'})
	const want = "fields separated by single spaces"
	switch {
	case len(line) == 0:
		return mismatch(want, "an empty line")
	case line[0] == ' ':
		return mismatch(want+" and no leading space", "a leading space in "+quote(line))
	case line[len(line)-1] == ' ':
		return mismatch(want+" and no trailing space", "a trailing space in "+quote(line))
	}
	if i := bytes.Index(line, []byte("  ")); i >= 0 {
		return mismatch(want, fmt.Sprintf("two spaces at offset %d in %s", i, quote(line)))
	}
	if i := bytes.IndexAny(line, "\t\v\f"); i >= 0 {
		return mismatch(want, fmt.Sprintf("byte 0x%02x as a separator at offset %d", line[i], i))
	}
	return pass("%d fields, single spaces", bytes.Count(line, []byte{' '})+1)
}

// judgeInTime: SPEC §1.1, the line arrives within the exchange deadline.
func judgeInTime(_ *Target, x *exchange) Outcome {
	if x.lfAt.IsZero() {
		return mismatch("a response line within "+x.limit.String(), x.describeEnd())
	}
	return pass("the line after %s (limit %s)", dur(x.rtt()), x.limit)
}

// judgeValid: SPEC §1.2 and §1.5, the whole exchange as a node judges it.
func judgeValid(t *Target, x *exchange) Outcome {
	r, err := x.strict(t.keys)
	if err != nil {
		return mismatch("a response passing every check of §1.5 (MAC under "+t.keyName()+")", explain(x, err))
	}
	return pass("synced=%d uncertainty_ms=%d source_age_ms=%d, line after %s",
		b2i(r.Synced), r.UncertaintyMs, r.SourceAgeMs, dur(x.rtt()))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// judgeMagic: SPEC §1.2, "TCKCLK" then the version token "2".
func judgeMagic(_ *Target, x *exchange) Outcome {
	f, o, ok := x.fields(2)
	if !ok {
		return o
	}
	if f[0] != protocol.Magic || f[1] != "2" {
		return mismatch(`"TCKCLK 2"`, quote([]byte(f[0]+" "+f[1])))
	}
	return pass(`"TCKCLK 2"`)
}

// judgeNonceEcho: SPEC §1.2, the request nonce byte for byte.
func judgeNonceEcho(_ *Target, x *exchange) Outcome {
	f, o, ok := x.fields(3)
	if !ok {
		return o
	}
	if want := x.nonce.String(); f[2] != want {
		return mismatch("nonce "+want, quote([]byte(f[2])))
	}
	return pass("nonce %s echoed", f[2])
}

// canonicalDecimal is the number rule of SPEC §1.2: what ParseUint accepts
// and FormatUint writes back unchanged (no sign, no leading zero, ≤ 2^64−1).
func canonicalDecimal(s string) bool {
	v, err := strconv.ParseUint(s, 10, 64)
	return err == nil && strconv.FormatUint(v, 10) == s
}

// numberFields are the positions of the numeric fields of a response.
var numberFields = []struct {
	at   int
	name string
}{{3, "reference_unix_ms"}, {4, "uncertainty_ms"}, {6, "source_age_ms"}}

// judgeNumbers: SPEC §1.2, canonical decimals.
func judgeNumbers(_ *Target, x *exchange) Outcome {
	f, o, ok := x.fields(responseFields)
	if !ok {
		return o
	}
	for _, n := range numberFields {
		if !canonicalDecimal(f[n.at]) {
			return mismatch(n.name+" as a canonical decimal u64", quote([]byte(f[n.at])))
		}
	}
	return pass("reference_unix_ms=%s uncertainty_ms=%s source_age_ms=%s", f[3], f[4], f[6])
}

// judgeSynced: SPEC §1.2, synced is 0 or 1.
func judgeSynced(_ *Target, x *exchange) Outcome {
	f, o, ok := x.fields(responseFields)
	if !ok {
		return o
	}
	if f[5] != "0" && f[5] != "1" {
		return mismatch(`synced "0" or "1"`, quote([]byte(f[5])))
	}
	return pass("synced=%s", f[5])
}

// canonicalB64 is the base64url rule of SPEC §1.2: strict, unpadded,
// exactly n bytes, and re-encoding to the same characters.
func canonicalB64(s string, n int) bool {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	return err == nil && len(b) == n && base64.RawURLEncoding.EncodeToString(b) == s
}

// judgeBase64: SPEC §1.2, canonical unpadded base64url nonce and mac.
func judgeBase64(_ *Target, x *exchange) Outcome {
	f, o, ok := x.fields(responseFields)
	if !ok {
		return o
	}
	if !canonicalB64(f[2], protocol.NonceSize) {
		return mismatch("a nonce of 22 canonical base64url characters", quote([]byte(f[2])))
	}
	if !canonicalB64(f[7], protocol.MACSize) {
		return mismatch("a mac of 43 canonical base64url characters", quote([]byte(f[7])))
	}
	return pass("nonce and mac canonical base64url")
}

// looseB64 decodes s as any base64 flavour, so the MAC check can still verify
// a MAC whose encoding 1.2-6 rejects.
func looseB64(s string, n int) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.StdEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == n {
			return b, true
		}
	}
	return nil, false
}

// looseResponse reads the fields of a response as leniently as their
// meaning allows (leading zeros, any base64 flavour); synced must be 0 or 1
// because the MAC input holds it as one byte of that value.
func looseResponse(f []string) (protocol.Response, string) {
	var r protocol.Response
	nonce, ok := looseB64(f[2], protocol.NonceSize)
	if !ok {
		return r, "the nonce " + quote([]byte(f[2])) + " does not decode to 16 bytes"
	}
	copy(r.Nonce[:], nonce)
	vals := make([]uint64, len(numberFields))
	for i, n := range numberFields {
		v, err := strconv.ParseUint(f[n.at], 10, 64)
		if err != nil {
			return r, n.name + " " + quote([]byte(f[n.at])) + " is not a u64"
		}
		vals[i] = v
	}
	r.ReferenceUnixMs, r.UncertaintyMs, r.SourceAgeMs = vals[0], vals[1], vals[2]
	switch f[5] {
	case "0", "1":
		r.Synced = f[5] == "1"
	default:
		return r, "synced " + quote([]byte(f[5])) + " is not 0 or 1"
	}
	mac, ok := looseB64(f[7], protocol.MACSize)
	if !ok {
		return r, "the mac " + quote([]byte(f[7])) + " does not decode to 32 bytes"
	}
	copy(r.MAC[:], mac)
	return r, ""
}

// judgeMAC: SPEC §1.3, HMAC-SHA-256 of the 50-byte input under the run's key.
func judgeMAC(t *Target, x *exchange) Outcome {
	f, o, ok := x.fields(responseFields)
	if !ok {
		return o
	}
	r, why := looseResponse(f)
	if why != "" {
		return fail("cannot verify the MAC: %s", why)
	}
	want := "a MAC valid under " + t.keyName()
	switch {
	case t.keys.Verify(&r) == nil:
		return pass("MAC valid under %s", t.keyName())
	case t.other.Verify(&r) == nil && t.dev:
		return mismatch(want, "a MAC valid under the plain secret: the target is not a development reference; run without --dev")
	case t.other.Verify(&r) == nil:
		return mismatch(want, "a MAC valid under dev_key only: the target is a --dev development reference, which passes only with --dev")
	}
	if name := t.diagnoseMAC(&r); name != "" {
		return mismatch(want, "a MAC over "+name)
	}
	return mismatch(want, "a MAC valid under neither the secret nor dev_key (another secret, or another MAC input)")
}

// Offsets in the 50-byte MAC input of SPEC §1.3.
const (
	offNUL, offVersion, offRef, offUnc, offAge = 6, 7, 25, 33, 42
)

// diagnoseMAC names a known mistake in building the MAC input that the
// target's MAC matches, for the operator's benefit; "" if none does.
func (t *Target) diagnoseMAC(r *protocol.Response) string {
	in := protocol.AppendMACInput(nil, r)
	noNUL := slices.Concat(in[:offNUL], in[offNUL+1:])
	little := slices.Clone(in)
	for _, span := range [][2]int{{offVersion, 2}, {offRef, 8}, {offUnc, 8}, {offAge, 8}} {
		slices.Reverse(little[span[0] : span[0]+span[1]])
	}
	for _, v := range []struct {
		name string
		in   []byte
	}{
		{"an input without the 0x00 after TCKCLK", noNUL},
		{"an input whose integers are packed little-endian", little},
	} {
		m := hmac.New(sha256.New, t.keyRaw)
		m.Write(v.in)
		if hmac.Equal(m.Sum(nil), r.MAC[:]) {
			return v.name
		}
	}
	return ""
}

// judgeUncertainty: SPEC §2.1, a synced sample has uncertainty_ms ≥ 1.
func judgeUncertainty(_ *Target, x *exchange) Outcome {
	f, o, ok := x.fields(responseFields)
	if !ok {
		return o
	}
	switch f[5] {
	case "0":
		return pass("synced=0: the rule binds synced samples only")
	case "1":
	default:
		return fail("cannot tell: synced is %s (see 1.2-5)", quote([]byte(f[5])))
	}
	u, err := strconv.ParseUint(f[4], 10, 64)
	switch {
	case err != nil:
		return fail("cannot tell: uncertainty_ms is %s (see 1.2-4)", quote([]byte(f[4])))
	case u == 0:
		return mismatch("uncertainty_ms ≥ 1 while synced=1", "uncertainty_ms=0 with synced=1")
	}
	return pass("synced=1 with uncertainty_ms=%d", u)
}

// judgePlausible: SPEC §7, the reference against the local clock. Reading
// happened between sending and the LF, so |w1 − R| ≤ u + rtt + 1 ms (the 1
// is R's truncation) when both clocks are right.
func judgePlausible(t *Target, x *exchange) Outcome {
	r, err := x.strict(t.keys)
	if err != nil {
		return fail("not judged: no valid response (%s)", explain(x, err))
	}
	off, ok := protocol.OffsetMs(x.lfWall.UnixNano(), r.ReferenceUnixMs)
	rtt := protocol.CeilMs(uint64(max(x.rtt(), 0)))
	allowed, ok2 := protocol.AddSat(r.UncertaintyMs, rtt+1)
	if !ok || (ok2 && off > allowed) {
		return mismatch(fmt.Sprintf("|local clock − reference| ≤ uncertainty_ms + RTT + 1 = %d ms", allowed),
			fmt.Sprintf("%d ms (the local clock may be the wrong one)", off))
	}
	return pass("reference within %d ms of the local clock (allowed %d ms)", off, allowed)
}
