package consensus

import "fmt"

// IdentityError: the data dir belongs to another NodeId.
type IdentityError struct {
	DataDir string
	Name    string
	Members []string
}

func (e *IdentityError) Error() string {
	return fmt.Sprintf("node: data dir %s belongs to a cluster whose voters are %v; cluster.name is %q (use the node's own name, or another data dir)", e.DataDir, e.Members, e.Name)
}
