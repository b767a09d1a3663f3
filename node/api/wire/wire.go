package wire

import "encoding/json"

// GrantRequest is the body of POST /v1/tickets/{name}/grant.
type GrantRequest struct {
	Holder string `json:"holder"`
	LeaseS int64  `json:"lease_s"`
	// WaitMs (0..=300000): wait this long for the ticket to be free, first
	// come first served (SPEC §4.2); 0 or absent fails at once with 409.
	WaitMs int64 `json:"wait_ms,omitempty"`
}

// RenewRequest is the body of POST /v1/tickets/{name}/renew.
type RenewRequest struct {
	Holder string `json:"holder"`
	Token  uint64 `json:"token"`
	LeaseS int64  `json:"lease_s"`
}

// ReleaseRequest is the body of POST /v1/tickets/{name}/release.
type ReleaseRequest struct {
	Holder string `json:"holder"`
	Token  uint64 `json:"token"`
}

// RevokeRequest is the optional body of POST /v1/tickets/{name}/revoke
// (admin, SPEC §4): with a token, only that grant is revoked. The answer
// is the ticket as GET shows it (Ticket, Revoked set).
type RevokeRequest struct {
	Token uint64 `json:"token,omitempty"`
}

// Grant is the 200 answer to grant and renew.
type Grant struct {
	Name   string `json:"name"`
	Holder string `json:"holder"`
	Token  uint64 `json:"token"`
	LeaseS uint8  `json:"lease_s"`
	// ConservativeValidBeforeUnixMs is the leader's wall ms when it received
	// the request (rounded down) + lease_s×1000, never + Δ.
	ConservativeValidBeforeUnixMs uint64 `json:"conservative_valid_before_unix_ms"`
	// RemainingMs is ConservativeValidBeforeUnixMs minus the leader's receive
	// time of THIS request: lease_s×1000 for a new grant or a renew, less for
	// an idempotent repeat of an older grant. The Go client's local
	// deadline is its send time + RemainingMs × (1 − 500 ppm).
	RemainingMs uint64 `json:"remaining_ms"`
	// WaitedMs (a blocking grant, SPEC §4.2): how long the request waited
	// on the leader before the Grant that succeeded, by the leader's
	// monotonic clock, rounded down. The grant happened at least this long
	// after the client sent the request, so the local deadline may start
	// from send time + WaitedMs × (1 − 500 ppm).
	WaitedMs uint64 `json:"waited_ms,omitempty"`
}

// Released is the 200 answer to release.
type Released struct {
	Name     string `json:"name"`
	Holder   string `json:"holder"`
	Token    uint64 `json:"token"`
	Released bool   `json:"released"`
}

// Ticket is a held ticket as GET and list show it.
type Ticket struct {
	Name                          string `json:"name"`
	Holder                        string `json:"holder"`
	Token                         uint64 `json:"token"`
	LeaseS                        uint8  `json:"lease_s"`
	ConservativeValidBeforeUnixMs uint64 `json:"conservative_valid_before_unix_ms"`
	// ServerExpiryUnixMs is when the cluster may expire the ticket (it
	// includes Δ). It is not a client deadline.
	ServerExpiryUnixMs uint64 `json:"server_expiry_unix_ms"`
	// ModifyIndex is the index of the entry that last changed the ticket
	// (a watch's answer, SPEC §4.2; also in the X-Ticket-Index header).
	// Pass it back as ?index= to wait for the next change.
	ModifyIndex uint64 `json:"modify_index,omitempty"`
	// Revoked: an administrator revoked it (SPEC §4). Its holder can no
	// longer renew it and must stop using the token; it frees at its
	// server-side expiry, or earlier by its holder's release.
	Revoked bool `json:"revoked,omitempty"`
	// Waiters (lists only): blocking grants queued for it on the leader
	// (SPEC §4.2).
	Waiters uint32 `json:"waiters,omitempty"`
}

// TicketList is the answer to GET /v1/tickets.
type TicketList struct {
	Tickets []Ticket `json:"tickets"`
	// Truncated is true when more tickets matched than the limit.
	Truncated bool `json:"truncated,omitempty"`
}

// ErrorBody is every error answer.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	Holder  string `json:"holder,omitempty"` // 409 held
	Token   uint64 `json:"token,omitempty"`  // 409 held
	Stage   string `json:"stage,omitempty"`  // 503
	Reason  string `json:"reason,omitempty"` // 503; 429: the full cap or share (node_cap, caller_share, node_share)
}

// Health is the answer of /livez and /readyz.
type Health struct {
	Status string `json:"status"` // "ok" or "unavailable"
	Stage  string `json:"stage,omitempty"`
	// Reason says why the node is not ready; on a FAILED clock it is the
	// SPEC §1.5 reason (rollback, mac, …).
	Reason string `json:"reason,omitempty"`
	// Detail is the longer human text (the FAILED error, the clock_check
	// progress, the hold-off instant).
	Detail string `json:"detail,omitempty"`
	// HoldOffUntilUnixMs is set while Grant and Expire are refused after a
	// restart that followed a FAILED clock (SPEC §4).
	HoldOffUntilUnixMs uint64 `json:"hold_off_until_unix_ms,omitempty"`
	// DevReference: the clock agent is a development reference (SPEC §2.2).
	DevReference bool `json:"dev_reference,omitempty"`
}

// Status is the answer of GET /v1/status.
type Status struct {
	NodeID             string      `json:"node_id"`
	Mode               string      `json:"mode"` // "single-node"
	Role               string      `json:"role"` // leader, follower, candidate, shutdown
	Leader             string      `json:"leader"`
	Stage              string      `json:"stage"`
	Ready              bool        `json:"ready"`
	Reason             string      `json:"reason,omitempty"`
	DeltaMs            uint64      `json:"delta_ms"`
	HoldOffUntilUnixMs uint64      `json:"hold_off_until_unix_ms,omitempty"`
	HoldOffCause       string      `json:"hold_off_cause,omitempty"` // why: the FAILED marker found at start
	TicketsActive      int         `json:"tickets_active"`
	Raft               RaftStatus  `json:"raft"`
	Clock              ClockStatus `json:"clock"`
}

// RaftStatus is the Raft part of Status.
type RaftStatus struct {
	Term              uint64 `json:"term"`
	LastIndex         uint64 `json:"last_index"`
	CommitIndex       uint64 `json:"commit_index"`
	AppliedIndex      uint64 `json:"applied_index"`
	LastSnapshotIndex uint64 `json:"last_snapshot_index"`
}

// ClockStatus is the clock-health part of Status (SPEC §3, §3.5).
type ClockStatus struct {
	Source           string `json:"source"` // "host" (no agent) or "agent"
	Stage            string `json:"stage"`  // the clock's readiness stage (clock_check … ready, failed)
	StageDetail      string `json:"stage_detail,omitempty"`
	Healthy          bool   `json:"healthy"`
	BoundMs          uint64 `json:"bound_ms"`       // running bound at this evaluation
	BoundLimitMs     uint64 `json:"bound_limit_ms"` // Δ/2
	DeltaMs          uint64 `json:"delta_ms"`
	LastSampleUnixMs uint64 `json:"last_sample_unix_ms,omitempty"`
	SinceSampleMs    uint64 `json:"since_sample_ms"`
	StalenessMs      uint64 `json:"staleness_ms,omitempty"`
	Reason           string `json:"reason,omitempty"` // SPEC §1.5 reason once FAILED
	Error            string `json:"error,omitempty"`  // the FAILED error
	FailedStage      string `json:"failed_stage,omitempty"`
	ClockStages      string `json:"clock_stages,omitempty"` // host mode: why the clock stages are skipped
	DevReference     bool   `json:"dev_reference"`
	// FailedMarker says whether this process recorded its FAILED in the data
	// dir ("written"), and otherwise why not.
	FailedMarker string        `json:"failed_marker,omitempty"`
	LastSample   *SampleStatus `json:"last_sample,omitempty"`
	Agents       []AgentStatus `json:"agents,omitempty"`
}

// Member is one entry of GET /v1/cluster/members.
type Member struct {
	ID string `json:"id"` // NodeId: NAME, or NAME~G for a later generation (SPEC §3.4)
	// Name and Generation split the NodeId: the cluster.name (trust-map
	// and gossip name) and G (1 for NAME). Cluster mode only.
	Name       string `json:"name,omitempty"`
	Generation int    `json:"generation,omitempty"`
	Address    string `json:"address"`
	Suffrage   string `json:"suffrage"` // voter, nonvoter, or "" (not in Raft: a gossip-only client)
	Leader     bool   `json:"leader"`
	// Cluster mode: what the member advertises in gossip (SPEC §5).
	Gossip        string `json:"gossip,omitempty"`         // alive, suspect, dead, left; "" when not in gossip
	Role          string `json:"role,omitempty"`           // as the member believes: voter, standby, client
	FailureDomain string `json:"failure_domain,omitempty"` //
	Clock         string `json:"clock,omitempty"`          // clock_check, healthy, failed
	ClockBoundMs  uint64 `json:"clock_bound_ms,omitempty"` // its running bound
	BoundLimitMs  uint64 `json:"bound_limit_ms,omitempty"` // Δ/2 it advertises
	DeltaMs       uint64 `json:"delta_ms,omitempty"`
	// Retired: the member advertises it retired (its clock FAILED) or the
	// replicated state holds its NodeId retired.
	Retired bool `json:"retired,omitempty"`
}

// Members is the answer of GET /v1/cluster/members.
type Members struct {
	Members []Member `json:"members"`
	// RetiredNodeIDs are the NodeIds the replicated state holds retired
	// (SPEC §3.4), sorted: never served or added again; the next
	// generation of a NAME is above every one of them. Cluster mode only.
	RetiredNodeIDs []string `json:"retired_node_ids,omitempty"`
}

// ReplaceRequest is the body of POST /v1/cluster/replace.
type ReplaceRequest struct {
	Old string `json:"old"`
	New string `json:"new"`
}

// Replaced is the answer of POST /v1/cluster/replace: OLD is retired and
// leaves the Raft configuration through the reconciler, NEW is in it
// (Suffrage nonvoter until the reconciler promotes it).
type Replaced struct {
	Old         string `json:"old"`
	New         string `json:"new"`
	NewSuffrage string `json:"new_suffrage"`
}

// SnapshotInfo is the answer of POST /v1/cluster/snapshot: the snapshot
// the called node took of its own state (a follower's too).
type SnapshotInfo struct {
	NodeID     string `json:"node_id"`
	Role       string `json:"role"` // leader, follower, ... when it was taken
	ID         string `json:"id"`
	Index      uint64 `json:"index"`
	Term       uint64 `json:"term"`
	SizeBytes  int64  `json:"size_bytes"`
	DurationMs int64  `json:"duration_ms"`
	Tickets    int    `json:"tickets"`
}

// SampleStatus is the clock's last accepted sample (SPEC §3.1), as
// /v1/status shows it.
type SampleStatus struct {
	Agent           string `json:"agent"`
	ReferenceUnixMs uint64 `json:"reference_unix_ms"` // R
	UncertaintyMs   uint64 `json:"uncertainty_ms"`    // u
	SourceAgeMs     uint64 `json:"source_age_ms"`
	RTTMs           uint64 `json:"rtt_ms"`
	OffsetMs        uint64 `json:"offset_ms"`      // ceil_ms(|w1 − R|)
	ErrorBoundMs    uint64 `json:"error_bound_ms"` // rtt + u + offset + 1
	AtUnixMs        int64  `json:"at_unix_ms"`     // w1, local wall clock when the LF arrived
}

// AgentStatus counts one clock agent's exchanges.
type AgentStatus struct {
	Addr        string `json:"addr"`
	Exchanges   uint64 `json:"exchanges"`
	OK          uint64 `json:"ok"`
	Unreachable uint64 `json:"unreachable"` // connect, timeout, io
	// ConsecutiveUnreachable resets on the agent's next answer.
	ConsecutiveUnreachable uint64 `json:"consecutive_unreachable"`
	LastResult             string `json:"last_result,omitempty"` // "ok" or a SPEC §1.5 reason
	LastError              string `json:"last_error,omitempty"`
	LastAtUnixMs           int64  `json:"last_at_unix_ms,omitempty"`
}

// MaxBatchOps is the most ops one POST /v1/batch may carry.
const MaxBatchOps = 256

// LeaderHeader, on an answer to a ticket op or a batch, names the leader
// (its NodeId) that the answering node forwards such requests to: the
// answer is good, and the same request sent to the leader's own address
// would save the forwarding hop. Absent when the node served it itself.
// A hint taken as the request arrived, never an instruction: the Go
// client's multi-address mode uses it to move to another address.
const LeaderHeader = "X-Ticket-Leader"

// BatchRequest is the body of POST /v1/batch: grant, renew and release ops
// that the server runs concurrently, each exactly as its single endpoint.
type BatchRequest struct {
	Ops []BatchOp `json:"ops"`
}

// BatchOp is one op of a batch: the fields of its single endpoint's body
// plus the op and the ticket name. A grant takes holder and lease_s, a
// renew holder, token and lease_s, a release holder and token; wait_ms is
// refused (a blocking grant is a request of its own).
type BatchOp struct {
	Op     string  `json:"op"` // "grant", "renew" or "release"
	Name   string  `json:"name"`
	Holder string  `json:"holder"`
	Token  *uint64 `json:"token,omitempty"`
	LeaseS *int64  `json:"lease_s,omitempty"`
}

// BatchResponse is the 200 answer to POST /v1/batch: one result per op,
// in the order of the ops.
type BatchResponse struct {
	Results []BatchResult `json:"results"`
}

// BatchResult is what the op's single endpoint would have answered: its
// HTTP status and its JSON body (a Grant, a Released or an ErrorBody).
type BatchResult struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

// ClusterHealth is the answer of GET /v1/cluster/health (SPEC §3.5), as
// Consul's autopilot health: whether the cluster can lose a node, where
// /readyz says whether one node serves clients.
type ClusterHealth struct {
	// Healthy: a leader is known and every voter is healthy.
	Healthy bool `json:"healthy"`
	// FailureTolerance is how many voters can fail with quorum kept:
	// healthy voters − (voters/2 + 1), at least 0.
	FailureTolerance int `json:"failure_tolerance"`
	// MaxFailureTolerance is the most the voter count allows:
	// (voters − 1)/2. ticketctl cluster health exits 0 only when the
	// cluster is healthy and FailureTolerance reaches it.
	MaxFailureTolerance int    `json:"max_failure_tolerance"`
	Voters              int    `json:"voters"`
	HealthyVoters       int    `json:"healthy_voters"`
	Leader              string `json:"leader"` // "" when none is known
	// ServedBy is the node that answered. LeaderView: it is the leader,
	// which alone knows every server's last Raft contact; a follower
	// answers from what it knows (its own contact with the leader, the
	// others' log index asked over the mesh).
	ServedBy   string         `json:"served_by"`
	LeaderView bool           `json:"leader_view"`
	Servers    []ServerHealth `json:"servers"`
}

// ServerHealth is one voter or standby of ClusterHealth.
type ServerHealth struct {
	ID string `json:"id"`
	// Suffrage in the Raft configuration: voter, nonvoter (a standby), or
	// "" for a Raft-eligible gossip member not in it (yet).
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
	Gossip   string `json:"gossip"` // alive, suspect, dead, left; "" when not in gossip
	Clock    string `json:"clock"`  // clock_check, healthy, failed (as it advertises)
	// ClockBoundMs is its advertised running bound, against Δ/2.
	ClockBoundMs uint64 `json:"clock_bound_ms"`
	// ClockBoundHistoryMs: the bounds the answering node saw it advertise,
	// one every 5 s over the last 5 minutes, oldest first (none while it
	// was not alive in gossip).
	ClockBoundHistoryMs []uint32 `json:"clock_bound_history_ms,omitempty"`
	Retired             bool     `json:"retired,omitempty"`
	Version             string   `json:"version,omitempty"` // its software version (an upgrade shows here)
	// LastContactMs: how long ago it last answered the leader's Raft
	// (the leader's view), or heard from the leader (a follower about
	// itself); 0 for the leader; absent when unknown.
	LastContactMs *int64 `json:"last_contact_ms,omitempty"`
	// Term is its Raft term: the answering node's own, and in the
	// leader's view each server's in its last AppendEntries answer (as
	// etcdctl endpoint status shows per member); absent when unknown.
	Term *uint64 `json:"term,omitempty"`
	// LastIndex is its last Raft log index, asked now; LogLag the
	// leader's minus it. Both absent when it did not answer.
	LastIndex *uint64 `json:"last_index,omitempty"`
	LogLag    *uint64 `json:"log_lag,omitempty"`
	Healthy   bool    `json:"healthy"`
	// Why says what is not healthy ("" when healthy).
	Why string `json:"why,omitempty"`
}
