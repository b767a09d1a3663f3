package clustertest

import (
	"os"
	"os/exec"
	"path/filepath"
)

// LookTool finds a system tool (ip, iptables, nft, ...) on PATH or in
// /usr/sbin and /sbin, which a non-login PATH may lack; "" when absent.
func LookTool(bin string) string {
	if p, err := exec.LookPath(bin); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(dir, bin); fileExists(p) {
			return p
		}
	}
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// IptablesTools are the iptables variants that work here: iptables-nft
// and iptables-legacy where both are installed (each has its own FORWARD
// chain, and a kernel may lack the legacy tables), else plain iptables.
// A bridge between test namespaces needs its ACCEPT rule in each (Docker
// sets the FORWARD policy to DROP).
func IptablesTools() []string {
	var out []string
	for _, name := range []string{"iptables-nft", "iptables-legacy"} {
		if p := LookTool(name); p != "" && exec.Command(p, "-S", "FORWARD").Run() == nil {
			out = append(out, p)
		}
	}
	if p := LookTool("iptables"); len(out) == 0 && p != "" {
		out = append(out, p)
	}
	return out
}
