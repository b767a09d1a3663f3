package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// SPEC §4: the local deadline is the send time + lease × (1 − 500 ppm).
func TestLocalDeadline(t *testing.T) {
	sent := time.Unix(1000, 0)
	for _, c := range []struct {
		ms   uint64
		want time.Duration
	}{
		{250000, 250*time.Second - 125*time.Millisecond},
		{30000, 30*time.Second - 15*time.Millisecond},
		{1000, time.Second - 500*time.Microsecond},
		{1, time.Millisecond - 500*time.Nanosecond},
		{0, 0},
	} {
		if got := LocalDeadline(sent, c.ms).Sub(sent); got != c.want {
			t.Errorf("%d ms: %v, want %v", c.ms, got, c.want)
		}
	}
}

func server(t *testing.T, status int, body string) *Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	sent := time.Unix(5000, 0)
	c, err := New(srv.URL, WithClock(func() time.Time { return sent }), WithHTTPClient(srv.Client()), WithFailover(0))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// SPEC §4: the deadline counts from this client's send time, never from a
// server time, and an idempotent repeat of an older grant gets only what is
// left of it.
func TestGrantDeadline(t *testing.T) {
	sent := time.Unix(5000, 0)
	for _, c := range []struct {
		name, body string
		want       time.Duration
	}{
		{"fresh", `{"name":"a","holder":"h","token":3,"lease_s":30,"conservative_valid_before_unix_ms":99,"remaining_ms":30000}`, 30*time.Second - 15*time.Millisecond},
		{"repeat of an older grant", `{"name":"a","holder":"h","token":3,"lease_s":30,"conservative_valid_before_unix_ms":99,"remaining_ms":12000}`, 12*time.Second - 6*time.Millisecond},
		{"no remaining_ms", `{"name":"a","holder":"h","token":3,"lease_s":30,"conservative_valid_before_unix_ms":99}`, 30*time.Second - 15*time.Millisecond},
		{"remaining above the lease", `{"name":"a","holder":"h","token":3,"lease_s":30,"conservative_valid_before_unix_ms":99,"remaining_ms":999999}`, 30*time.Second - 15*time.Millisecond},
		{"nothing left", `{"name":"a","holder":"h","token":3,"lease_s":30,"conservative_valid_before_unix_ms":99,"remaining_ms":0}`, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := server(t, 200, c.body).Grant(context.Background(), "a", "h", 30)
			if err != nil {
				t.Fatal(err)
			}
			if l.SentAt != sent || l.Deadline.Sub(sent) != c.want || l.Token != 3 {
				t.Fatalf("lease %+v: deadline %v after send, want %v", l, l.Deadline.Sub(sent), c.want)
			}
		})
	}
}

// SPEC §4.2: a blocking grant's deadline counts from the send time plus
// the time it waited on the leader, both less the 500 ppm rate error.
func TestGrantWaitedDeadline(t *testing.T) {
	sent := time.Unix(5000, 0)
	body := `{"name":"a","holder":"h","token":3,"lease_s":30,"conservative_valid_before_unix_ms":99,"remaining_ms":30000,"waited_ms":100000}`
	l, err := server(t, 200, body).Grant(context.Background(), "a", "h", 30)
	if err != nil {
		t.Fatal(err)
	}
	wantStart := 100*time.Second - 50*time.Millisecond
	if l.SentAt.Sub(sent) != wantStart || l.Deadline.Sub(sent) != wantStart+30*time.Second-15*time.Millisecond || l.WaitedMs != 100000 {
		t.Fatalf("start %v, deadline %v after send; want %v and %v", l.SentAt.Sub(sent), l.Deadline.Sub(sent), wantStart, wantStart+30*time.Second-15*time.Millisecond)
	}
}

func TestErrors(t *testing.T) {
	_, err := server(t, 409, `{"error":"held","message":"held by x","holder":"x","token":7}`).Grant(context.Background(), "a", "h", 30)
	var e *Error
	if !errors.Is(err, ErrHeld) || !errors.As(err, &e) || e.Holder != "x" || e.Token != 7 || e.StatusCode != 409 {
		t.Fatalf("held: %v", err)
	}
	if errors.Is(err, ErrNotFound) {
		t.Fatal("held matches not_found")
	}
	_, err = server(t, 502, `<html>bad gateway</html>`).Get(context.Background(), "a")
	if !errors.As(err, &e) || e.ErrorBody.Error != "bad_gateway" || e.Message != "<html>bad gateway</html>" {
		t.Fatalf("502: %v", err)
	}
	_, err = server(t, 503, `{"error":"unavailable","message":"m","stage":"clock","reason":"bound"}`).Renew(context.Background(), "a", "h", 1, 5)
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &e) || e.Stage != "clock" || e.Reason != "bound" {
		t.Fatalf("503: %v", err)
	}
}

func TestNewAddr(t *testing.T) {
	for _, ok := range []string{"", "127.0.0.1:7980", "http://h:1", "https://h:1/"} {
		if _, err := New(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"ftp://h:1", "http://", "http://h:1/x", "http://h:1?q=1", "://"} {
		if _, err := New(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
