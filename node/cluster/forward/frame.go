package forward

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the frame format version this package speaks.
const Version = 1

// MaxFrame is the largest frame body (everything after the length prefix).
const MaxFrame = 64 << 10

// headerLen is version, kind and request id.
const headerLen = 1 + 1 + 8

// Frame kinds.
const (
	kindRequest  = 1
	kindResponse = 2
)

// Op is what a request asks of the leader.
type Op uint8

// Ops.
const (
	OpGrant Op = iota + 1
	OpRenew
	OpRelease
	OpGet
	OpList
	OpWatch  // a blocking read (SPEC §4.2)
	OpRevoke // an administrator's Revoke (SPEC §4); the HTTP API checked the admin token
)

var opNames = map[Op]string{OpGrant: "grant", OpRenew: "renew", OpRelease: "release", OpGet: "get", OpList: "list", OpWatch: "watch", OpRevoke: "revoke"}

func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// IsWrite reports whether the op changes state (grant, renew, release,
// revoke): such a request whose outcome is unknown must not be retried
// blindly.
func (o Op) IsWrite() bool { return o == OpGrant || o == OpRenew || o == OpRelease || o == OpRevoke }

// Code is the outcome of a forwarded request.
type Code uint8

// Codes. The names (String) are the error codes of the HTTP API.
const (
	CodeOK Code = iota
	CodeHeld
	CodeMismatch
	CodeNotFound
	CodeBadRequest
	CodeNotLeader
	CodeUnavailable
	_ // 7 and 8 are never sent and never reused: a failed clock or a
	_ // hold-off answers unavailable with its stage and reason (SPEC §1.5)
	CodeInternal
	codeCount
)

var codeNames = [codeCount]string{"ok", "held", "mismatch", "not_found", "bad_request", "not_leader", "unavailable", "", "", "internal"}

// known reports whether c is a code this package sends and accepts.
func (c Code) known() bool { return c < codeCount && codeNames[c] != "" }

func (c Code) String() string {
	if c.known() {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Request is one forwarded call. Which fields an op uses:
//
//	grant:   Name, Holder, LeaseS, WaitMs
//	renew:   Name, Holder, Token, LeaseS
//	release: Name, Holder, Token
//	get:     Name
//	list:    Prefix, Limit
//	watch:   Name, Index, WaitMs
//	revoke:  Name, Token (0: whoever holds it)
//
// Encoding a request with a field its op does not use is an error. Values
// are not checked here (a lease_s of 0 travels): the leader validates them
// and answers bad_request.
type Request struct {
	Op     Op
	Name   string
	Holder string
	Token  uint64
	LeaseS uint32
	Prefix string
	Limit  uint32
	WaitMs uint32
	Index  uint64 // watch: answer once the ticket's modify index is above it
}

// Ticket is a ticket as the leader reports it.
type Ticket struct {
	Name                          string
	Holder                        string
	Token                         uint64
	LeaseS                        uint32
	ConservativeValidBeforeUnixMs uint64
	ServerExpiryUnixMs            uint64
	RemainingMs                   uint64
	Revoked                       bool   // SPEC §4 (Revoke)
	Waiters                       uint32 // blocking grants queued on the leader (SPEC §4.2; lists only)
}

// Watched is the answer to a watch: the ticket's modify index and the
// ticket when it is held.
type Watched struct {
	Index  uint64
	Ticket *Ticket
}

// List is the answer to a list request.
type List struct {
	Tickets   []Ticket
	Truncated bool
}

// Response is the leader's answer. Code other than CodeOK carries Message
// and, as the code needs, Stage and Reason (unavailable) or Holder and
// Token (held). At most one of Ticket, List and
// Watched is set.
type Response struct {
	Code    Code
	Message string
	Stage   string
	Reason  string
	Holder  string
	Token   uint64
	Ticket  *Ticket
	List    *List
	Watched *Watched
	// WaitedMs (with Ticket, a blocking grant's answer): how long the
	// request waited on the leader before the Grant that succeeded,
	// rounded down (the client's local deadline may count it).
	WaitedMs uint64
}

// Err returns nil for CodeOK and the response as an *Error otherwise.
func (r Response) Err() error {
	if r.Code == CodeOK {
		return nil
	}
	return &Error{Code: r.Code, Message: r.Message, Stage: r.Stage, Reason: r.Reason, Holder: r.Holder, Token: r.Token}
}

// Body tags of a response.
const (
	bodyNone   = 0
	bodyTicket = 1
	bodyList   = 2
	bodyWatch  = 3 // u64 index, bool held, then the ticket when held
	bodyWaited = 4 // a ticket, then u64 waited_ms (> 0)
	// bodyFlagged, or'ed into a tag with tickets, says each ticket ends
	// with a u8 of flags (bit 0: revoked; bit 1: a u32 > 0 follows, the
	// blocking grants queued on the leader for it). A body is flagged only
	// when one of its tickets has a flag set, so a peer of the release
	// before revocations reads every answer that holds none.
	bodyFlagged = 0x10
	flagRevoked = 1
	flagWaiters = 2
)

// Decoding errors. Every decode failure wraps ErrMalformed.
var (
	ErrMalformed = errors.New("forward: malformed frame")
	ErrTooLarge  = fmt.Errorf("%w: frame larger than %d bytes", ErrMalformed, MaxFrame)
)

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// WriteFrame writes body with its u32 big-endian length prefix.
func WriteFrame(w io.Writer, body []byte) error {
	if len(body) > MaxFrame {
		return ErrTooLarge
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err := w.Write(buf)
	return err
}

// ReadFrame reads one frame's body. A length over MaxFrame is ErrTooLarge,
// before anything of the body is read.
func ReadFrame(r io.Reader) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > MaxFrame {
		return nil, ErrTooLarge
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}

// --- encoding

type enc struct {
	b       []byte
	err     error
	flagged bool // tickets carry their flags byte
}

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *enc) str(s string) {
	if len(s) > 0xffff {
		e.fail("a string of %d bytes (at most 65535)", len(s))
		return
	}
	e.b = binary.BigEndian.AppendUint16(e.b, uint16(len(s)))
	e.b = append(e.b, s...)
}
func (e *enc) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}
func (e *enc) fail(format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf("forward: cannot encode "+format, args...)
	}
}
func (e *enc) done() ([]byte, error) {
	if e.err == nil && len(e.b) > MaxFrame {
		e.err = ErrTooLarge
	}
	return e.b, e.err
}

func header(kind uint8, id uint64) *enc {
	e := &enc{b: make([]byte, 0, 64)}
	e.u8(Version)
	e.u8(kind)
	e.u64(id)
	return e
}

// unused lists the fields set in r that its op does not use.
func unused(r Request) []string {
	var out []string
	check := func(used bool, set bool, name string) {
		if !used && set {
			out = append(out, name)
		}
	}
	g, rn, rl, gt, ls, wt, rv := r.Op == OpGrant, r.Op == OpRenew, r.Op == OpRelease, r.Op == OpGet, r.Op == OpList, r.Op == OpWatch, r.Op == OpRevoke
	check(g || rn || rl || gt || wt || rv, r.Name != "", "name")
	check(g || rn || rl, r.Holder != "", "holder")
	check(rn || rl || rv, r.Token != 0, "token")
	check(g || rn, r.LeaseS != 0, "lease_s")
	check(ls, r.Prefix != "", "prefix")
	check(ls, r.Limit != 0, "limit")
	check(g || wt, r.WaitMs != 0, "wait_ms")
	check(wt, r.Index != 0, "index")
	return out
}

// AppendRequest encodes a request frame body (without the length prefix).
func AppendRequest(id uint64, r Request) ([]byte, error) {
	if _, ok := opNames[r.Op]; !ok {
		return nil, fmt.Errorf("forward: cannot encode unknown %v", r.Op)
	}
	if u := unused(r); len(u) > 0 {
		return nil, fmt.Errorf("forward: cannot encode %v with %v set (not used by %v)", r.Op, u, r.Op)
	}
	e := header(kindRequest, id)
	e.u8(uint8(r.Op))
	switch r.Op {
	case OpGrant:
		e.str(r.Name)
		e.str(r.Holder)
		e.u32(r.LeaseS)
		e.u32(r.WaitMs)
	case OpRenew:
		e.str(r.Name)
		e.str(r.Holder)
		e.u64(r.Token)
		e.u32(r.LeaseS)
	case OpRelease:
		e.str(r.Name)
		e.str(r.Holder)
		e.u64(r.Token)
	case OpGet:
		e.str(r.Name)
	case OpList:
		e.str(r.Prefix)
		e.u32(r.Limit)
	case OpWatch:
		e.str(r.Name)
		e.u64(r.Index)
		e.u32(r.WaitMs)
	case OpRevoke:
		e.str(r.Name)
		e.u64(r.Token)
	}
	return e.done()
}

func (e *enc) ticket(t Ticket) {
	e.str(t.Name)
	e.str(t.Holder)
	e.u64(t.Token)
	e.u32(t.LeaseS)
	e.u64(t.ConservativeValidBeforeUnixMs)
	e.u64(t.ServerExpiryUnixMs)
	e.u64(t.RemainingMs)
	if e.flagged {
		var f uint8
		if t.Revoked {
			f |= flagRevoked
		}
		if t.Waiters > 0 {
			f |= flagWaiters
		}
		e.u8(f)
		if t.Waiters > 0 {
			e.u32(t.Waiters)
		}
	}
}

// flagged reports whether a response's tickets need their flags byte.
func (r *Response) flagged() bool {
	var ts []Ticket
	switch {
	case r.Ticket != nil:
		ts = []Ticket{*r.Ticket}
	case r.List != nil:
		ts = r.List.Tickets
	case r.Watched != nil && r.Watched.Ticket != nil:
		ts = []Ticket{*r.Watched.Ticket}
	}
	for _, t := range ts {
		if t.Revoked || t.Waiters > 0 {
			return true
		}
	}
	return false
}

// AppendResponse encodes a response frame body (without the length prefix).
func AppendResponse(id uint64, r Response) ([]byte, error) {
	if !r.Code.known() {
		return nil, fmt.Errorf("forward: cannot encode unknown %v", r.Code)
	}
	if (r.Ticket != nil && r.List != nil) || (r.Watched != nil && (r.Ticket != nil || r.List != nil)) {
		return nil, errors.New("forward: cannot encode a response with more than one of a ticket, a list and a watch")
	}
	if r.WaitedMs > 0 && r.Ticket == nil {
		return nil, errors.New("forward: cannot encode waited_ms without a ticket")
	}
	e := header(kindResponse, id)
	e.u8(uint8(r.Code))
	e.str(r.Message)
	e.str(r.Stage)
	e.str(r.Reason)
	e.str(r.Holder)
	e.u64(r.Token)
	var flag uint8
	if e.flagged = r.flagged(); e.flagged {
		flag = bodyFlagged
	}
	switch {
	case r.Ticket != nil && r.WaitedMs > 0:
		e.u8(bodyWaited | flag)
		e.ticket(*r.Ticket)
		e.u64(r.WaitedMs)
	case r.Ticket != nil:
		e.u8(bodyTicket | flag)
		e.ticket(*r.Ticket)
	case r.List != nil:
		e.u8(bodyList | flag)
		e.u32(uint32(len(r.List.Tickets)))
		for _, t := range r.List.Tickets {
			e.ticket(t)
		}
		e.bool(r.List.Truncated)
	case r.Watched != nil:
		e.u8(bodyWatch | flag)
		e.u64(r.Watched.Index)
		e.bool(r.Watched.Ticket != nil)
		if r.Watched.Ticket != nil {
			e.ticket(*r.Watched.Ticket)
		}
	default:
		e.u8(bodyNone)
	}
	return e.done()
}

// --- decoding

type dec struct {
	b       []byte
	err     error
	flagged bool // tickets carry their flags byte
}

func (d *dec) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = malformed("%s: need %d bytes, %d left", what, n, len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u8(what string) uint8 {
	if v := d.take(1, what); v != nil {
		return v[0]
	}
	return 0
}
func (d *dec) u32(what string) uint32 {
	if v := d.take(4, what); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}
func (d *dec) u64(what string) uint64 {
	if v := d.take(8, what); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}
func (d *dec) str(what string) string {
	l := d.take(2, what+" length")
	if l == nil {
		return ""
	}
	return string(d.take(int(binary.BigEndian.Uint16(l)), what))
}
func (d *dec) bool(what string) bool {
	switch v := d.u8(what); {
	case d.err != nil:
	case v > 1:
		d.err = malformed("%s: %d is not a boolean", what, v)
	default:
		return v == 1
	}
	return false
}
func (d *dec) end() error {
	if d.err == nil && len(d.b) > 0 {
		d.err = malformed("%d trailing bytes", len(d.b))
	}
	return d.err
}

func parseHeader(body []byte, kind uint8) (*dec, uint64, error) {
	if len(body) > MaxFrame {
		return nil, 0, ErrTooLarge
	}
	d := &dec{b: body}
	v := d.u8("version")
	k := d.u8("kind")
	id := d.u64("request id")
	switch {
	case d.err != nil:
		return nil, 0, d.err
	case v != Version:
		return nil, 0, malformed("version %d (this node speaks %d)", v, Version)
	case k != kind:
		return nil, 0, malformed("frame kind %d, want %d", k, kind)
	}
	return d, id, nil
}

// ParseRequest decodes a request frame body strictly: a known version and
// op, exactly the op's fields, no trailing bytes.
func ParseRequest(body []byte) (id uint64, r Request, err error) {
	d, id, err := parseHeader(body, kindRequest)
	if err != nil {
		return 0, Request{}, err
	}
	r.Op = Op(d.u8("op"))
	switch r.Op {
	case OpGrant:
		r.Name, r.Holder, r.LeaseS, r.WaitMs = d.str("name"), d.str("holder"), d.u32("lease_s"), d.u32("wait_ms")
	case OpRenew:
		r.Name, r.Holder, r.Token, r.LeaseS = d.str("name"), d.str("holder"), d.u64("token"), d.u32("lease_s")
	case OpRelease:
		r.Name, r.Holder, r.Token = d.str("name"), d.str("holder"), d.u64("token")
	case OpGet:
		r.Name = d.str("name")
	case OpList:
		r.Prefix, r.Limit = d.str("prefix"), d.u32("limit")
	case OpWatch:
		r.Name, r.Index, r.WaitMs = d.str("name"), d.u64("index"), d.u32("wait_ms")
	case OpRevoke:
		r.Name, r.Token = d.str("name"), d.u64("token")
	default:
		if d.err == nil {
			return 0, Request{}, malformed("unknown op %d", uint8(r.Op))
		}
	}
	if err := d.end(); err != nil {
		return 0, Request{}, err
	}
	return id, r, nil
}

func (d *dec) ticket() Ticket {
	t := Ticket{
		Name: d.str("ticket name"), Holder: d.str("ticket holder"), Token: d.u64("ticket token"),
		LeaseS: d.u32("ticket lease_s"), ConservativeValidBeforeUnixMs: d.u64("conservative_valid_before_unix_ms"),
		ServerExpiryUnixMs: d.u64("server_expiry_unix_ms"), RemainingMs: d.u64("remaining_ms"),
	}
	if d.flagged {
		switch f := d.u8("ticket flags"); {
		case d.err != nil:
		case f&^(flagRevoked|flagWaiters) != 0:
			d.err = malformed("ticket flags %#02x: unknown bits", f)
		default:
			t.Revoked = f&flagRevoked != 0
			if f&flagWaiters != 0 {
				if t.Waiters = d.u32("ticket waiters"); t.Waiters == 0 && d.err == nil {
					d.err = malformed("waiters 0 under the waiters flag")
				}
			}
		}
	}
	return t
}

// minTicket is the encoded size of a ticket with empty strings.
const minTicket = 2 + 2 + 8 + 4 + 8 + 8 + 8

// ParseResponse decodes a response frame body strictly: a known version,
// code and body tag, a list count that fits the frame, booleans 0 or 1, no
// trailing bytes.
func ParseResponse(body []byte) (id uint64, r Response, err error) {
	d, id, err := parseHeader(body, kindResponse)
	if err != nil {
		return 0, Response{}, err
	}
	r.Code = Code(d.u8("code"))
	if d.err == nil && !r.Code.known() {
		return 0, Response{}, malformed("unknown code %d", uint8(r.Code))
	}
	r.Message, r.Stage, r.Reason, r.Holder, r.Token = d.str("message"), d.str("stage"), d.str("reason"), d.str("holder"), d.u64("token")
	tag := d.u8("body")
	if d.flagged = tag&bodyFlagged != 0; d.flagged {
		tag &^= bodyFlagged
		if tag == bodyNone {
			return 0, Response{}, malformed("flagged body tag %d without a ticket", tag|bodyFlagged)
		}
	}
	switch {
	case d.err != nil:
	case tag == bodyNone:
	case tag == bodyTicket:
		t := d.ticket()
		r.Ticket = &t
	case tag == bodyWaited:
		t := d.ticket()
		r.Ticket, r.WaitedMs = &t, d.u64("waited_ms")
		if d.err == nil && r.WaitedMs == 0 {
			return 0, Response{}, malformed("waited_ms 0 under the waited body tag")
		}
	case tag == bodyList:
		n := d.u32("ticket count")
		if d.err == nil && uint64(n)*minTicket > uint64(len(d.b)) {
			return 0, Response{}, malformed("%d tickets cannot fit in %d bytes", n, len(d.b))
		}
		l := &List{}
		for i := uint32(0); i < n && d.err == nil; i++ {
			l.Tickets = append(l.Tickets, d.ticket())
		}
		l.Truncated = d.bool("truncated")
		r.List = l
	case tag == bodyWatch:
		w := &Watched{Index: d.u64("watch index")}
		if d.bool("watch held") {
			t := d.ticket()
			w.Ticket = &t
		}
		r.Watched = w
	default:
		return 0, Response{}, malformed("unknown body tag %d", tag)
	}
	if err := d.end(); err != nil {
		return 0, Response{}, err
	}
	if d.flagged && !r.flagged() {
		return 0, Response{}, malformed("a flagged body whose tickets have no flag set")
	}
	return id, r, nil
}
