//go:build tckclk_testfaults

package node

// TestFaultExpireEarly sets the broken expiry of the safety scenarios
// (Deps.brokenExpireEarly: the leader frees tickets Δ early) for a process.
// It exists only in a binary built with -tags tckclk_testfaults, so no
// production build can call it.
func TestFaultExpireEarly(d *Deps) { d.brokenExpireEarly = true }
