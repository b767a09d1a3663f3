package kernel

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/tckclk/tckclk/agent/source"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var at = time.Unix(1_800_000_000, 0)

// SPEC §2.2 kernel: STA_UNSYNC clear and maxerror < 16 s.
func TestInterpret(t *testing.T) {
	cases := []struct {
		name   string
		state  int
		status int32
		maxerr int64
		want   source.Reason // "" = healthy
		wantU  time.Duration
	}{
		{"synced", unix.TIME_OK, 0x2001, 1500, "", 1500 * time.Microsecond},
		{"synced zero maxerror still > 0", unix.TIME_OK, 0x2001, 0, "", time.Microsecond},
		{"leap insert pending is fine", unix.TIME_INS, 0x2011, 20, "", 20 * time.Microsecond},
		{"unsync bit", unix.TIME_OK, unix.STA_UNSYNC, 100, source.ReasonLeap, 0},
		{"time error", unix.TIME_ERROR, 0, 100, source.ReasonLeap, 0},
		{"maxerror at 16 s", unix.TIME_OK, 0, 16_000_000, source.ReasonQuality, 0},
		{"negative maxerror", unix.TIME_OK, 0, -1, source.ReasonGarbage, 0},
		{"unknown state", 9, 0, 1, source.ReasonGarbage, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx := unix.Timex{Status: c.status, Maxerror: c.maxerr}
			s, err := Interpret(at, c.state, &tx)
			if c.want == "" {
				if err != nil {
					t.Fatalf("want healthy, got %v", err)
				}
				if s.Uncertainty != c.wantU || s.Offset != 0 || !s.At.Equal(at) {
					t.Fatalf("sample %+v, want uncertainty %v", s, c.wantU)
				}
				return
			}
			if got := source.ReasonOf(err); err == nil || got != c.want {
				t.Fatalf("want reason %q, got %v", c.want, err)
			}
		})
	}
}

// The real system call, read-only: whatever the host's state, Poll must
// agree with a direct reading, and must not have changed anything.
func TestPollRealKernel(t *testing.T) {
	var before unix.Timex
	if _, err := unix.Adjtimex(&before); err != nil {
		t.Skipf("adjtimex not permitted here: %v", err)
	}
	src := New(nil, nil)
	s, err := src.Poll(context.Background())
	var after unix.Timex
	if _, err := unix.Adjtimex(&after); err != nil {
		t.Fatal(err)
	}
	if before.Freq != after.Freq || before.Status != after.Status || before.Constant != after.Constant {
		t.Fatalf("the kernel clock state changed during a read-only poll: %+v → %+v", before, after)
	}
	unsync := after.Status&unix.STA_UNSYNC != 0
	t.Logf("host kernel: status %#x maxerror %d µs → sample %+v err %v", after.Status, after.Maxerror, s, err)
	switch {
	case unsync && source.ReasonOf(err) != source.ReasonLeap:
		t.Fatalf("STA_UNSYNC set but poll says %v", err)
	case !unsync && after.Maxerror < MaxError.Microseconds() && err != nil:
		t.Fatalf("kernel synchronised but poll failed: %v", err)
	case err == nil && s.Uncertainty <= 0:
		t.Fatalf("healthy sample with zero uncertainty")
	}
}

func TestPollError(t *testing.T) {
	src := New(nil, func(*unix.Timex) (int, error) { return 0, errors.New("EPERM") })
	if _, err := src.Poll(context.Background()); source.ReasonOf(err) != source.ReasonUnreachable {
		t.Fatalf("want unreachable, got %v", err)
	}
}
