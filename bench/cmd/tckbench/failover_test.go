package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// -failover-kinds name the fresh-cluster targets (clock runs elsewhere),
// and the section's targets are judged at their boundaries: kill -9,
// ticketd's median ≤ 0.25× etcd's and its max ≤ 1 s; machine lost,
// ticketd's median ≤ etcd's.
func TestFailoverTargetsAndVerdicts(t *testing.T) {
	it := itemOptions{sections: []string{"failover"}, failoverKinds: []string{"clock", "ticketd", "etcd-lost"}}
	if got := failoverTargets(it); !slices.Equal(got, []foTarget{{"ticketd", false}, {"etcd", true}}) {
		t.Fatalf("targets %+v", got)
	}
	if got := failoverTargets(itemOptions{sections: []string{"load"}, failoverKinds: allFailoverKinds}); len(got) != 0 {
		t.Fatalf("targets without the failover section: %+v", got)
	}
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	verdict := func(tk, ek, tl, el []time.Duration) string {
		fos := []failoverResult{
			{Target: "ticketd ×3", Kind: kindKill, Trials: tk}, {Target: "etcd ×3", Kind: kindKill, Trials: ek},
			{Target: "ticketd ×3", Kind: kindLost, Trials: tl}, {Target: "etcd ×3", Kind: kindLost, Trials: el},
		}
		return strings.Join(failoverTargetsMet(fos), "\n")
	}
	got := verdict(ms(200, 250, 1000), ms(900, 1000, 1100), ms(800, 1000), ms(1000, 1000))
	for _, want := range []string{"median 0.25× etcd's (250ms vs 1s; target ≤ 0.25×) met, its max 1s (target ≤ 1s) met", "machine lost: ticketd's median 1.00× etcd's (1s vs 1s; target ≤ 1.00×) met"} {
		if !strings.Contains(got, want) {
			t.Errorf("at the boundaries: %q lacks %q", got, want)
		}
	}
	got = verdict(ms(200, 251, 1001), ms(900, 1000, 1100), ms(1001), ms(1000))
	if strings.Count(got, "**missed**") != 3 {
		t.Errorf("just past every boundary: %q", got)
	}
	if got := verdict(ms(100), nil, nil, ms(1000)); got != "" {
		t.Errorf("verdicts without both systems: %q", got)
	}
	if l := (failoverResult{Target: "etcd ×3"}).label(); l != "etcd ×3 kill -9" {
		t.Errorf("an older report's row: %q", l)
	}
}
