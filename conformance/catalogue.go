package conformance

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tckclk/tckclk/protocol"
)

// checks is the catalogue, in SPEC order. IDs are stable: operators and
// scripts select them with --only; a new check takes the next free number
// of its section.
var checks = []Check{
	{"1.1-1", "1.1", Must, "a response is exactly one LF-terminated line, and the agent closes (EOF) within --timeout after it", single(judgeOneLine)},
	{"1.1-2", "1.1", Must, "the response line is at most 256 bytes before its LF", single(judgeSize)},
	{"1.1-3", "1.1", Must, "the response line is printable ASCII ending in a single LF: no CR, TAB, NUL or non-ASCII byte", single(judgeBytes)},
	{"1.1-4", "1.1", Must, "fields are separated by exactly one space, with no leading or trailing space", single(judgeSpaces)},
	{"1.1-5", "1.1", Must, "bytes after the request LF are never answered: two pipelined requests get at most one answer", runPipelined},
	{"1.1-6", "1.1", Must, "every answer echoes its own request's fresh nonce: an earlier answer is never replayed", runFreshNonce},
	{"1.1-7", "1.1", Must, "the response line arrives within --timeout", single(judgeInTime)},
	{"1.2-1", "1.2", Must, "a valid request gets a response passing every check of §1.5 (size, bytes, fields, magic, version, grammar, nonce, MAC)", single(judgeValid)},
	{"1.2-2", "1.2", Must, `the response starts with the magic "TCKCLK" and the version token "2"`, single(judgeMagic)},
	{"1.2-3", "1.2", Must, "the response nonce is byte-identical to the request nonce", runNonceEcho},
	{"1.2-4", "1.2", Must, "reference_unix_ms, uncertainty_ms and source_age_ms are canonical decimals: no sign, no leading zero, ≤ 2^64−1", single(judgeNumbers)},
	{"1.2-5", "1.2", Must, "synced is 0 or 1", single(judgeSynced)},
	{"1.2-6", "1.2", Must, "nonce and mac are canonical unpadded base64url (RFC 4648 §5) of 22 and 43 characters", runBase64},
	{"1.3-1", "1.3", Must, "the MAC is HMAC-SHA-256 of the 50-byte §1.3 input under the secret (under dev_key with --dev, and only then)", single(judgeMAC)},
	{"2.1-1", "2.1", Must, "uncertainty_ms ≥ 1 whenever synced=1", single(judgeUncertainty)},
	{"2.1-2", "2.1", Must, "every invalid request of the test vectors gets no answer, and the connection is closed", runInvalidVectors},
	{"2.1-3", "2.1", Must, `a request of another version ("TCKCLK 1 …") gets no answer, and the connection is closed`, runOtherVersion},
	{"2.1-4", "2.1", Must, "a silent client is closed within 10 s, without an answer", runSilent},
	{"2.1-5", "2.1", Must, "a client trickling a line without LF, a byte every 200 ms (slowloris), is closed within 10 s", runSlowloris},
	{"2.1-6", "2.1", Must, "a request arriving in three fragments within the read timeout is answered", runFragments},
	{"2.1-7", "2.1", Must, "100 concurrent clients all get valid answers", runConcurrent},
	{"2.1-8", "2.1", Should, "plausibility: the reference agrees with the local clock within uncertainty_ms + RTT + 1 ms", single(judgePlausible)},
}

// Catalogue returns every check, in SPEC order.
func Catalogue() []Check { return slices.Clone(checks) }

// IDs lists the check IDs in catalogue order.
func IDs() []string {
	ids := make([]string, len(checks))
	for i, c := range checks {
		ids[i] = c.ID
	}
	return ids
}

func lookup(id string) (Check, bool) {
	for _, c := range checks {
		if c.ID == id {
			return c, true
		}
	}
	return Check{}, false
}

// withNonces runs judge on k exchanges, each with a fresh nonce from next;
// the first failure stands, prefixed with the exchange's number.
func withNonces(ctx context.Context, t *Target, k int, next func() (protocol.Nonce, error), judge func(*Target, *exchange) Outcome) Outcome {
	var o Outcome
	for i := range k {
		n, err := next()
		if err != nil {
			return fail("no nonce: %v", err)
		}
		if o = judge(t, t.request(ctx, n)); !o.OK {
			if k > 1 {
				o.Detail = fmt.Sprintf("exchange %d of %d: %s", i+1, k, o.Detail)
			}
			return o
		}
	}
	return o
}

// runNonceEcho: 1.2-3, with a nonce that shows both base64url-only characters.
func runNonceEcho(ctx context.Context, t *Target) Outcome {
	return withNonces(ctx, t, 1, t.nonceShowingAlphabet, judgeNonceEcho)
}

// runBase64: 1.2-6 over three exchanges, since an agent's MAC shows a
// base64url-only character only in about three answers of four.
func runBase64(ctx context.Context, t *Target) Outcome {
	return withNonces(ctx, t, 3, t.nonceShowingAlphabet, judgeBase64)
}

// runFreshNonce: 1.1-6, three requests in a row, each answered for itself.
func runFreshNonce(ctx context.Context, t *Target) Outcome {
	const k = 3
	var sent []string
	for i := range k {
		n, err := t.nonce()
		if err != nil {
			return fail("no nonce: %v", err)
		}
		x := t.request(ctx, n)
		f, o, ok := x.fields(3)
		if !ok {
			o.Detail = fmt.Sprintf("request %d of %d: %s", i+1, k, o.Detail)
			return o
		}
		want := n.String()
		if j := slices.Index(sent, f[2]); j >= 0 {
			return mismatch(fmt.Sprintf("the answer to request %d to echo its nonce %s", i+1, want),
				fmt.Sprintf("the nonce of request %d: an earlier answer replayed", j+1))
		}
		if f[2] != want {
			return mismatch(fmt.Sprintf("the answer to request %d to echo its nonce %s", i+1, want), quote([]byte(f[2])))
		}
		sent = append(sent, want)
	}
	return pass("%d requests in a row, each answered with its own nonce", k)
}

// runPipelined: 1.1-5, two requests in one write.
func runPipelined(ctx context.Context, t *Target) Outcome {
	first, err := t.nonce()
	if err != nil {
		return fail("no nonce: %v", err)
	}
	second, err := t.nonce()
	if err != nil {
		return fail("no nonce: %v", err)
	}
	both := protocol.AppendRequest(protocol.EncodeRequest(protocol.Request{Nonce: first}), protocol.Request{Nonce: second})
	return judgePipelined(t.do(ctx, first, send{parts: [][]byte{both}, limit: t.timeout}), second)
}

func judgePipelined(x *exchange, second protocol.Nonce) Outcome {
	if x.end == endConnect {
		return fail("%s", x.describeEnd())
	}
	i := bytes.IndexByte(x.raw, '\n')
	switch {
	case i < 0:
		return mismatch("one answer, to the first request", "none: "+x.describeEnd())
	case len(x.raw) > i+1:
		rest := x.raw[i+1:]
		return mismatch("at most one answer", fmt.Sprintf("%d more bytes after the first line: %s", len(rest), quote(rest)))
	}
	if f := fieldsOf(x.raw[:i]); len(f) >= 3 && f[2] == second.String() {
		return mismatch("the answer to the first request", "an answer to the second one (it read past the first LF)")
	}
	return pass("one answer, then %s", x.describeEnd())
}

// judgeUnanswered: no byte back, and the target closes the connection itself.
func judgeUnanswered(x *exchange) Outcome {
	switch {
	case x.end == endConnect:
		return fail("%s", x.describeEnd())
	case len(x.raw) > 0:
		return mismatch("no answer", "an answer "+quote(x.raw))
	case !x.closed():
		return mismatch("the connection closed within "+x.limit.String(), "still open after "+dur(x.elapsed()))
	}
	return pass("closed after %s without an answer", dur(x.elapsed()))
}

// unanswered sends payload (nothing if nil) and waits up to the silent
// client limit for the target to close.
func (t *Target) unanswered(ctx context.Context, payload []byte) *exchange {
	s := send{limit: SilentCloseLimit}
	if payload != nil {
		s.parts = [][]byte{payload}
	}
	return t.do(ctx, protocol.Nonce{}, s)
}

// runInvalidVectors: 2.1-2, every invalid request of the vectors at once.
func runInvalidVectors(ctx context.Context, t *Target) Outcome {
	reqs, err := invalidRequests()
	if err != nil {
		return fail("%v", err)
	}
	xs := make([]*exchange, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() { xs[i] = t.unanswered(ctx, r.Wire()) })
	}
	wg.Wait()
	var bad []string
	var slowest time.Duration
	for i, x := range xs {
		if o := judgeUnanswered(x); !o.OK {
			bad = append(bad, reqs[i].Name+": "+o.Detail)
		}
		slowest = max(slowest, x.elapsed())
	}
	if len(bad) > 0 {
		return mismatch(fmt.Sprintf("no answer and a close for each of the %d invalid requests", len(reqs)),
			fmt.Sprintf("%d failed: %s", len(bad), strings.Join(bad, "; ")))
	}
	return pass("all %d refused and closed (slowest close %s)", len(reqs), dur(slowest))
}

// runOtherVersion: 2.1-3, a well-formed request of version 1.
func runOtherVersion(ctx context.Context, t *Target) Outcome {
	n, err := t.nonce()
	if err != nil {
		return fail("no nonce: %v", err)
	}
	return judgeUnanswered(t.unanswered(ctx, []byte("TCKCLK 1 "+n.String()+"\n")))
}

// runSilent: 2.1-4, connect and send nothing.
func runSilent(ctx context.Context, t *Target) Outcome {
	return judgeUnanswered(t.unanswered(ctx, nil))
}

// slowlorisEvery is the pace of the slowloris client of 2.1-5.
const slowlorisEvery = 200 * time.Millisecond

// runSlowloris: 2.1-5, a byte every 200 ms for 10 s, never an LF: an agent
// that restarts its read timeout on every byte never closes in time.
func runSlowloris(ctx context.Context, t *Target) Outcome {
	n, err := t.nonce()
	if err != nil {
		return fail("no nonce: %v", err)
	}
	count := int(SilentCloseLimit / slowlorisEvery)
	line := []byte("TCKCLK 2 " + n.String())
	for len(line) < count {
		line = append(line, 'A')
	}
	parts := make([][]byte, count)
	for i := range parts {
		parts[i] = line[i : i+1]
	}
	return judgeUnanswered(t.do(ctx, n, send{parts: parts, gap: slowlorisEvery, limit: SilentCloseLimit}))
}

// runFragments: 2.1-6, one valid request in three writes.
func runFragments(ctx context.Context, t *Target) Outcome {
	n, err := t.nonce()
	if err != nil {
		return fail("no nonce: %v", err)
	}
	req := protocol.EncodeRequest(protocol.Request{Nonce: n})
	gap := min(50*time.Millisecond, t.timeout/10)
	x := t.do(ctx, n, send{parts: [][]byte{req[:5], req[5:20], req[20:]}, gap: gap, limit: t.timeout})
	o := judgeValid(t, x)
	if o.OK {
		return pass("answered a request sent in 3 fragments %s apart: %s", dur(gap), o.Detail)
	}
	return o
}

// concurrentClients is the load of 2.1-7.
const concurrentClients = 100

// runConcurrent: 2.1-7, 100 clients released at once.
func runConcurrent(ctx context.Context, t *Target) Outcome {
	nonces := make([]protocol.Nonce, concurrentClients)
	for i := range nonces {
		var err error
		if nonces[i], err = t.nonce(); err != nil {
			return fail("no nonce: %v", err)
		}
	}
	xs := make([]*exchange, concurrentClients)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, n := range nonces {
		wg.Go(func() {
			<-start
			xs[i] = t.request(ctx, n)
		})
	}
	close(start)
	wg.Wait()
	valid, first := 0, ""
	var slowest time.Duration
	for i, x := range xs {
		if _, err := x.strict(t.keys); err != nil {
			if first == "" {
				first = fmt.Sprintf("client %d: %s", i+1, explain(x, err))
			}
			continue
		}
		valid++
		slowest = max(slowest, x.rtt())
	}
	if valid < concurrentClients {
		return mismatch(fmt.Sprintf("%d valid answers", concurrentClients), fmt.Sprintf("%d; first failure: %s", valid, first))
	}
	return pass("%d of %d valid, slowest line after %s", valid, concurrentClients, dur(slowest))
}
