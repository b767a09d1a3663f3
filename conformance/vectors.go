package conformance

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"
)

// vectorsJSON is a committed copy of the shared TCKCLK/2 test vectors
// (SPEC §1.3); TestVectorsCopyIdentical keeps it byte-identical to
// protocol/testdata/tckclk2.json.
//
//go:embed vectors/tckclk2.json
var vectorsJSON []byte

// invalidRequest is a request line an agent must not answer.
type invalidRequest struct {
	Name string `json:"name"`
	Line string `json:"line"`
}

// wire is what the suite sends: the line and its LF, except for the vector
// that tests the size limit, which the vectors say is sent without any LF.
func (r invalidRequest) wire() []byte {
	if r.Name == "oversize-no-lf" {
		return []byte(r.Line)
	}
	return []byte(r.Line + "\n")
}

// invalidRequests parses the vectors once, on first use.
var invalidRequests = sync.OnceValues(func() ([]invalidRequest, error) {
	var v struct {
		InvalidRequests []invalidRequest `json:"invalid_requests"`
	}
	if err := json.Unmarshal(vectorsJSON, &v); err != nil {
		return nil, fmt.Errorf("conformance: embedded vectors: %w", err)
	}
	if len(v.InvalidRequests) == 0 {
		return nil, fmt.Errorf("conformance: embedded vectors hold no invalid_requests")
	}
	return v.InvalidRequests, nil
})
