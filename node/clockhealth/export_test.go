package clockhealth

// SetBeforeRead makes f run in every exchange of m after its request is
// written and before its answer is read: a test stands in for a node
// stalled between the answer's arrival and its read.
func SetBeforeRead(m *Monitor, f func()) { m.beforeRead = f }

// KernelSample is kernelSample (rxstamp.go), for its table test.
var KernelSample = kernelSample
