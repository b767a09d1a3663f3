package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"
)

// Profiling rates while --debug.pprof is on: block events are sampled
// about one per 20 µs blocked, one mutex contention event in 100.
const (
	pprofBlockRateNs     = 20_000
	pprofMutexFraction   = 100
	pprofShutdownTimeout = 2 * time.Second
)

// startPprof serves net/http/pprof (CPU, heap, block, mutex, goroutine
// profiles) on addr, a loopback HOST:PORT only, and turns block and mutex
// profiling on. It is off unless --debug.pprof is given (for bench/'s
// profiling: tckbench -profile); the API listener never serves it. stop ends the
// listener.
func startPprof(addr string, log *slog.Logger) (bound string, stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, fmt.Errorf("--debug.pprof %q: want a loopback HOST:PORT: %v", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", nil, fmt.Errorf("--debug.pprof %q: the profiler listens on loopback only (127.0.0.1, ::1 or localhost)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--debug.pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	runtime.SetBlockProfileRate(pprofBlockRateNs)
	runtime.SetMutexProfileFraction(pprofMutexFraction)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof listener stopped", "err", err)
		}
	}()
	log.Warn("pprof listener on (profiling only: never in production)", "addr", ln.Addr().String())
	return ln.Addr().String(), func() {
		_ = srv.Close()
		<-done
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(0)
	}, nil
}
