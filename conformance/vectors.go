package conformance

import "github.com/tckclk/tckclk/protocol/vectors"

// invalidRequests are the request lines of the shared vectors an agent must
// not answer (SPEC §1.3, §2.1).
func invalidRequests() ([]vectors.InvalidRequest, error) {
	f, err := vectors.Load()
	if err != nil {
		return nil, err
	}
	return f.InvalidRequests, nil
}
