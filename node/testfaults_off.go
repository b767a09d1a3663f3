//go:build !tckclk_testfaults

package node

// faultExpireEarly: no build without -tags tckclk_testfaults frees a
// ticket early (testfaults.go).
const faultExpireEarly = false
