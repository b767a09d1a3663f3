package api

import "bytes"

// The fast reading of a batch body. The Go client's coalescer sends each
// op as json.Marshal writes a wire.BatchOp: one flat object of plain
// strings and integers. scanBatch and scanOp read exactly that shape (JSON
// whitespace allowed between tokens) and nothing else: a string with an
// escape, a byte outside printable ASCII or a control byte, a number that
// is not a canonical integer in range, an unknown or repeated field, a
// missing "op" or "name", an op other than grant, renew and release, a
// nested value, null, more than MaxBatchOps ops or data after the object
// make them give up, and the body (or the op) is read again by
// DecodeBatchReference (DecodeBatchOpReference), whose answers, refusals
// included, are therefore the only ones any input gets. What the scanner
// accepts, the reference reads into the same fields (FuzzBatchDecoders).

// scanBatch reads a whole batch body {"ops":[op,...]} of 1..=MaxBatchOps
// ops in the fast shape; ok is false for any other body.
func scanBatch(body []byte) (ops []batchOp, ok bool) {
	i := expect(body, skipWS(body, 0), '{')
	if i < 0 {
		return nil, false
	}
	i = skipWS(body, i)
	for _, c := range []byte(`"ops"`) {
		if i >= len(body) || body[i] != c {
			return nil, false
		}
		i++
	}
	if i = expect(body, skipWS(body, i), ':'); i < 0 {
		return nil, false
	}
	if i = expect(body, skipWS(body, i), '['); i < 0 {
		return nil, false
	}
	ops = make([]batchOp, 0, min(MaxBatchOps, bytes.Count(body, []byte{'{'}))) // ≥ the ops
	for {
		if len(ops) == MaxBatchOps {
			return nil, false // the reference words the refusal
		}
		start := skipWS(body, i)
		f, end, ok := scanOp(body, start)
		if !ok {
			return nil, false
		}
		ops = append(ops, batchOp{raw: body[start:end:end], f: f, scanned: true})
		i = skipWS(body, end)
		if i < len(body) && body[i] == ']' {
			break
		}
		if i = expect(body, i, ','); i < 0 {
			return nil, false
		}
	}
	if i = expect(body, skipWS(body, i+1), '}'); i < 0 {
		return nil, false
	}
	return ops, skipWS(body, i) == len(body)
}

// scanOpExact reads raw as one op in the fast shape, with nothing but
// whitespace around it.
func scanOpExact(raw []byte) (opFields, bool) {
	f, end, ok := scanOp(raw, skipWS(raw, 0))
	return f, ok && skipWS(raw, end) == len(raw)
}

// scanOp reads the op object that starts at b[i]; end is the index after
// its closing brace.
func scanOp(b []byte, i int) (f opFields, end int, ok bool) {
	f, name, holder, end, ok := scanFields(b, i, fOp|fName|fHolder|fToken|fLease|fWait)
	if !ok || f.seen&(fOp|fName) != fOp|fName {
		return f, 0, false // the reference words "is required"
	}
	// One allocation for both strings: a Write's name and holder live
	// and die together.
	both := string(name) + string(holder)
	f.wr.Name, f.wr.Holder = both[:len(name)], both[len(name):]
	return f, end, true
}

// scanWrite reads the body of a single grant (fields takes: holder,
// lease_s, wait_ms), renew (holder, token, lease_s) or release (holder,
// token) in the fast shape, every field of takes but wait_ms given and
// nothing but whitespace around the object; ok is false for any other
// body, which decodeWriteReference then reads (and words the refusal).
func scanWrite(body []byte, takes uint8) (f opFields, ok bool) {
	f, _, holder, end, ok := scanFields(body, skipWS(body, 0), takes)
	if !ok || f.seen|fWait != takes|fWait || skipWS(body, end) != len(body) {
		return f, false
	}
	f.wr.Holder = string(holder)
	return f, true
}

// scanFields reads the flat object at b[i] whose fields are among takes;
// end is the index after its closing brace. Name and holder are returned
// as the bytes of the body.
func scanFields(b []byte, i int, takes uint8) (f opFields, name, holder []byte, end int, ok bool) {
	if i = expect(b, i, '{'); i < 0 {
		return f, nil, nil, 0, false
	}
	for {
		ks, ke := scanPlain(b, skipWS(b, i))
		if ke < 0 {
			return f, nil, nil, 0, false
		}
		bit := opField(b[ks:ke])
		if bit&takes == 0 || f.seen&bit != 0 {
			return f, nil, nil, 0, false
		}
		f.seen |= bit
		if i = expect(b, skipWS(b, ke+1), ':'); i < 0 {
			return f, nil, nil, 0, false
		}
		i = skipWS(b, i)
		switch bit {
		case fOp:
			vs, ve := scanPlain(b, i)
			if ve < 0 {
				return f, nil, nil, 0, false
			}
			if f.op = knownOp(b[vs:ve]); f.op == "" {
				return f, nil, nil, 0, false
			}
			i = ve + 1
		case fName, fHolder:
			vs, ve := scanPlain(b, i)
			if ve < 0 {
				return f, nil, nil, 0, false
			}
			if bit == fName {
				name = b[vs:ve]
			} else {
				holder = b[vs:ve]
			}
			i = ve + 1
		case fLease:
			neg := i < len(b) && b[i] == '-'
			if neg {
				i++
			}
			v, n := scanDigits(b, i, 18)
			if n < 0 {
				return f, nil, nil, 0, false
			}
			f.lease = int64(v)
			if neg {
				f.lease = -f.lease
			}
			i = n
		default: // fToken, fWait: non-negative
			v, n := scanDigits(b, i, 19)
			if n < 0 {
				return f, nil, nil, 0, false
			}
			if bit == fToken {
				f.wr.Token = v
			} else {
				f.waitMs = v
			}
			i = n
		}
		i = skipWS(b, i)
		if i < len(b) && b[i] == '}' {
			return f, name, holder, i + 1, true
		}
		if i = expect(b, i, ','); i < 0 {
			return f, nil, nil, 0, false
		}
	}
}

// opField is the bit of a batch op's field name; 0 for any other.
func opField(key []byte) uint8 {
	switch string(key) {
	case "op":
		return fOp
	case "name":
		return fName
	case "holder":
		return fHolder
	case "token":
		return fToken
	case "lease_s":
		return fLease
	case "wait_ms":
		return fWait
	}
	return 0
}

// knownOp is the op name the bytes spell, "" for any other.
func knownOp(v []byte) string {
	switch string(v) {
	case "grant":
		return "grant"
	case "renew":
		return "renew"
	case "release":
		return "release"
	}
	return ""
}

// scanPlain reads a string at b[i] whose bytes are all printable ASCII
// without '"' or '\' (so its JSON text is its value): s..e is its content,
// b[e] the closing quote; e < 0 for anything else.
func scanPlain(b []byte, i int) (s, e int) {
	if i >= len(b) || b[i] != '"' {
		return 0, -1
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return i + 1, j
		case c < 0x20 || c > 0x7e || c == '\\':
			return 0, -1
		}
	}
	return 0, -1
}

// scanDigits reads a canonical decimal (0, or no leading zero) of at most
// max digits at b[i]; next is the index after it, < 0 when there is none.
// A fraction or exponent after it is left to the caller's next token check.
func scanDigits(b []byte, i, max int) (v uint64, next int) {
	j := i
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		v = v*10 + uint64(b[j]-'0')
		j++
	}
	if n := j - i; n == 0 || n > max || n > 1 && b[i] == '0' {
		return 0, -1
	}
	return v, j
}

// expect is the index after b[i] when b[i] is c, else -1.
func expect(b []byte, i int, c byte) int {
	if i >= 0 && i < len(b) && b[i] == c {
		return i + 1
	}
	return -1
}

// skipWS is the index of the first byte at or after i that is not JSON
// whitespace.
func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
