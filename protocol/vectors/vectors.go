// Package vectors holds the TCKCLK/2 test vectors made by an independent
// implementation (SPEC §1.3): a byte-identical copy of
// shared/vectors/tckclk2.json (protocol's TestVectorsCopyIdentical keeps it
// so), embedded and parsed once. The protocol, agent and clock-health tests
// replay them, and the conformance suite sends the invalid requests to the
// agents it checks. Standard library only.
package vectors

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"
)

//go:embed tckclk2.json
var raw []byte

// Raw returns the embedded file's bytes (a copy).
func Raw() []byte { return append([]byte(nil), raw...) }

// Valid is a valid exchange with its MAC input.
type Valid struct {
	Name            string `json:"name"`
	SecretASCII     string `json:"secret_ascii"`
	Nonce           string `json:"nonce"`
	NonceHex        string `json:"nonce_hex"`
	ReferenceUnixMs string `json:"reference_unix_ms"`
	UncertaintyMs   string `json:"uncertainty_ms"`
	Synced          int    `json:"synced"`
	SourceAgeMs     string `json:"source_age_ms"`
	MACInputHex     string `json:"mac_input_hex"`
	MAC             string `json:"mac"`
	RequestLine     string `json:"request_line"`
	ResponseLine    string `json:"response_line"`
}

// DevReference is a sample signed with dev_key.
type DevReference struct {
	SecretASCII     string `json:"secret_ascii"`
	DevKeyHex       string `json:"dev_key_hex"`
	Nonce           string `json:"nonce"`
	ReferenceUnixMs string `json:"reference_unix_ms"`
	UncertaintyMs   string `json:"uncertainty_ms"`
	Synced          int    `json:"synced"`
	SourceAgeMs     string `json:"source_age_ms"`
	MAC             string `json:"mac"`
	ResponseLine    string `json:"response_line"`
}

// InvalidResponse must be rejected for Reason when the request nonce was
// ExpectNonce.
type InvalidResponse struct {
	Name        string `json:"name"`
	Line        string `json:"line"`
	Reason      string `json:"reason"`
	ExpectNonce string `json:"expect_nonce"`
}

// InvalidRequest is a request line an agent must not answer.
type InvalidRequest struct {
	Name string `json:"name"`
	Line string `json:"line"`
}

// Wire is what a client sends: the line and its LF, except for the vector
// that tests the size limit, which the vectors say is sent without any LF.
func (r InvalidRequest) Wire() []byte {
	if r.Name == "oversize-no-lf" {
		return []byte(r.Line)
	}
	return []byte(r.Line + "\n")
}

// File is the whole vector file.
type File struct {
	Valid            []Valid           `json:"valid"`
	DevReference     DevReference      `json:"dev_reference"`
	InvalidResponses []InvalidResponse `json:"invalid_responses"`
	InvalidRequests  []InvalidRequest  `json:"invalid_requests"`
}

// Load parses the embedded file once. Callers must not modify the result.
var Load = sync.OnceValues(func() (*File, error) {
	var f File
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("vectors: embedded tckclk2.json: %w", err)
	}
	if len(f.Valid) == 0 || len(f.InvalidResponses) == 0 || len(f.InvalidRequests) == 0 || f.DevReference.ResponseLine == "" {
		return nil, fmt.Errorf("vectors: embedded tckclk2.json has an empty section")
	}
	return &f, nil
})
