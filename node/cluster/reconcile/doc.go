// Package reconcile keeps the Raft core bounded (SPEC §5 "Bounded core",
// "Reconciler"): Plan is a pure function from the leader's view (gossip
// members, the Raft configuration, the limits) to an ordered list of
// configuration changes; Runner applies them on the leader one at a time,
// debounced, re-planning after each.
//
// Invariants (property-tested with rapid):
//   - every step keeps the live voters (alive in gossip or in Raft contact)
//     a majority of the configuration it leaves; order is add and promote,
//     then demote, then remove; a step that would break the majority is
//     withheld for a later plan;
//   - at the fixed point: voters = min(max_voters, fit nodes), odd from
//     three up (two fit nodes with max_voters > 1 both vote), spread over as
//     many failure domains as the fit nodes offer; standbys ≤ max_standbys;
//     everything else is outside the configuration;
//   - a node is added only as a non-voter and promoted only when CaughtUp;
//     a retired, clock-unhealthy or ineligible node is never added or
//     promoted and is taken out; the leader is never demoted or removed;
//   - a gone voter (gossip-dead or retired, and silent in Raft) keeps its
//     slot while raft.dead_voter_grace runs (the Runner times it:
//     Member.DeadPastGrace), unless a caught-up replacement takes it —
//     promoted first, then the gone voter removed; past the grace it is
//     removed, a minority of the current voters per plan at most;
//   - a configuration server superseded by a later generation of its name
//     alive in gossip (NAME~G', SPEC §3.4), or gone while another live
//     member advertises its address, keeps no slot; the removal of a
//     server holding the address of a node to be added comes before that
//     addition (hashicorp/raft refuses a duplicate address), and an
//     addition whose address stays held is withheld; the Runner skips an
//     addition that fails and goes on with the plan.
//
// Hazards: Plan trusts its input. A configuration server missing from
// Input.Members counts as dead, so list every configuration server with its
// RaftContact. While a better node catches up, the voter it replaces keeps
// its slot (a placeholder; or the best caught-up standby takes it), and a
// node catching up for a voter slot is a non-voter not counted against
// max_standbys: during such a transition there may be more non-voters.
package reconcile
