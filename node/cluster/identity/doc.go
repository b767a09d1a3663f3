// Package identity holds a cluster node's ed25519 identity (SPEC §5
// "Identity"): the private key from cluster.internode.identity_key xor
// identity_key_file, and the trust map cluster.internode.trusted_peer_keys
// (NodeId → 32-byte public key) that the mesh handshake and the membership
// delegates check peers against.
//
// Use: key, err := Load(inline, file) → store, err := NewStore(name,
// key.Public().(ed25519.PublicKey), trustMap) → pass store wherever a
// Lookup(id) is wanted → store.Replace(newMap) on SIGHUP.
//
// Invariants:
//   - Every error is a *config.Error naming the key path an operator must
//     fix (cluster.internode.identity_key, …identity_key_file,
//     …trusted_peer_keys.<name>); errors never contain private-key bytes,
//     not even a decoded prefix.
//   - A Trust is immutable after ParseTrust; a Store swaps whole Trusts
//     atomically, so a reader sees the old map or the new one, never a mix.
//   - A trust map always contains this node's own name with this node's own
//     public key (the self rule): NewStore and Replace refuse anything else,
//     so one trust file can be deployed unchanged to every node.
//
// Hazards: the private key is a plain ed25519.PrivateKey; callers must not
// log or print it. Replace keeps the old map on any error, so a bad reload
// leaves the node running with the previous trust — the caller must log
// the returned error, or the operator never learns the reload failed.
package identity
