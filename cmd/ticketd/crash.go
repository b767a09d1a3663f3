package main

import (
	"os"
	"runtime/debug"
	"syscall"
)

// crashRestartable makes an unexpected crash one a supervisor restarts.
//
// The Go runtime ends a process on an unrecovered panic (in any goroutine:
// hashicorp/raft panics in its own on an invariant it cannot keep) or a
// fatal runtime error with exit status 2 — ticketd's "refused: bad
// configuration or data dir, needs an operator" (SPEC §3.4), which the
// systemd unit keeps down (RestartPreventExitStatus=2) and deploy/demo.sh
// does not restart. A crash is not a refusal: nothing was decided about
// the data dir, and a node that stays down costs the cluster a voter.
// With the traceback level "crash" the runtime prints the full traceback,
// then kills the process with SIGABRT instead of exiting: a death by
// signal, which systemd's Restart=on-failure, compose's on-failure and
// Kubernetes restart, and which no exit status of ours can be mistaken
// for. A panic in another goroutine cannot be recovered, so this is done
// once, before anything starts.
//
// SIGABRT would write a core dump where the system allows one, with the
// node's keys and the agent secret in it; the soft core limit is set to 0
// unless the operator asked for cores themselves (GOTRACEBACK=crash in
// the environment).
func crashRestartable() {
	debug.SetTraceback("crash")
	if os.Getenv("GOTRACEBACK") == "crash" {
		return
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CORE, &lim); err == nil && lim.Cur != 0 {
		lim.Cur = 0
		_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &lim) // lowering the soft limit is always allowed
	}
}
