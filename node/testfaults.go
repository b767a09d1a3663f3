//go:build tckclk_testfaults

package node

// faultExpireEarly is testHooks.expireEarly for every node of the process
// (TestFaultExpireEarly); in other builds it is the constant false
// (testfaults_off.go).
var faultExpireEarly bool

// TestFaultExpireEarly sets the broken expiry of the safety scenarios
// (testHooks.expireEarly: the leader frees tickets Δ early) for a process;
// call it before RunWith. It exists only in a binary built with -tags
// tckclk_testfaults, so no production build can call it.
func TestFaultExpireEarly() { faultExpireEarly = true }
