package node

import "github.com/tckclk/tckclk/node/cluster"

// testHooks are what this package's tests hand a node beside its Deps
// (runWith): no part of Deps, so nothing outside the package can set them.
type testHooks struct {
	built func(*server) // the node, once built
	// expireEarly (the safety scenarios prove they can fail) makes the
	// leader stamp its Expire entries Δ ahead of its clock, so tickets are
	// freed as if their expiries carried no Δ: the bug SPEC §4's expiry
	// rule exists to prevent. A -tags tckclk_testfaults binary sets it for
	// the process (TestFaultExpireEarly).
	expireEarly bool
	cluster     *cluster.Tuning // cluster library tuning
}
