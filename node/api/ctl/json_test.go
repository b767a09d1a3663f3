package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// fakeTicketd answers grant and renew on a loopback port with a fixed
// remaining_ms, the way ticketd does.
func fakeTicketd(t *testing.T, remainingMs uint64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"name":"n","holder":"h","token":7,"lease_s":30,"conservative_valid_before_unix_ms":1700000030000,"remaining_ms":%d}`, remainingMs)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// Issue 10, SPEC §4: --json on grant and renew carries the local deadline,
// the value the README says to trust: send time + remaining_ms × (1 − 500
// ppm), here counted from a fixed clock so it is exact.
func TestJSONCarriesLocalDeadline(t *testing.T) {
	addr := fakeTicketd(t, 30000)
	now := time.UnixMilli(1_700_000_000_000)
	for _, args := range [][]string{
		{"--addr", addr, "grant", "n", "--holder", "h", "--lease", "30", "--json"},
		{"--addr", addr, "renew", "n", "--holder", "h", "--token", "7", "--lease", "30", "--json"},
	} {
		var out, errb bytes.Buffer
		env := testEnv(nil, &out, &errb)
		env.Now = func() time.Time { return now }
		if code := Main(context.Background(), args, env); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errb.String())
		}
		var got map[string]any
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out.String())
		}
		// 30 000 ms − ceil(30 000 ms × 500 ppm) = 29 985 ms.
		if got["local_deadline_in_ms"] != float64(29985) || got["local_deadline_unix_ms"] != float64(1_700_000_029_985) ||
			got["token"] != float64(7) || got["remaining_ms"] != float64(30000) {
			t.Fatalf("%q: %s", args, out.String())
		}
	}
}
