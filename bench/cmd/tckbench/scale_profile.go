package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
)

// scaleProf saves the scale section's leader profiles with -profile (each
// ticketd then serves --debug.pprof): a CPU profile during the fill once
// half the tickets are in, the heap after the fill, a CPU profile across
// the leader's snapshot. Without -profile every method does nothing.
type scaleProf struct {
	ctx context.Context
	dir string
	tag string
	s   *server
	out io.Writer
	wg  sync.WaitGroup
}

func scaleProfiler(ctx context.Context, dir string, s *server, tag string, out io.Writer) *scaleProf {
	return &scaleProf{ctx: ctx, dir: dir, tag: tag, s: s, out: out}
}

// fetch saves one profile of the leader of the moment (kind "profile" for
// CPU, "heap"; secs > 0 asks for that long a window).
func (p *scaleProf) fetch(name, kind string, secs int) {
	if p.dir == "" || p.s.leader >= len(p.s.pprof) {
		return
	}
	at := p.s.leader
	if lead, err := leaderOf(p.ctx, p.s); err == nil && lead >= 0 && lead < len(p.s.pprof) {
		at = lead // leadership may have moved during the fill
	}
	url := fmt.Sprintf("http://%s/debug/pprof/%s", p.s.pprof[at], kind)
	if secs > 0 {
		url += fmt.Sprintf("?seconds=%d", secs)
	}
	file := filepath.Join(p.dir, fmt.Sprintf("%s-%s.pprof", p.tag, name))
	if err := fetch(p.ctx, url, file); err != nil {
		fmt.Fprintf(p.out, "%s: profile %s: %v\n", p.tag, name, err)
		return
	}
	fmt.Fprintf(p.out, "%s: saved %s\n", p.tag, file)
}

// now saves a profile and returns when it is saved.
func (p *scaleProf) now(name, kind string, secs int) { p.fetch(name, kind, secs) }

// start begins a profile window; the returned func waits until it is saved.
func (p *scaleProf) start(name, kind string, secs int) func() {
	if p.dir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.fetch(name, kind, secs)
	}()
	return func() { <-done }
}

// during returns a progress callback that starts one profile window (in
// the background) the first time at least at tickets are in.
func (p *scaleProf) during(name, kind string, secs, at int) func(done int) {
	var once sync.Once
	return func(done int) {
		if p.dir == "" || done < at {
			return
		}
		once.Do(func() {
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.fetch(name, kind, secs)
			}()
		})
	}
}

// wait waits for the windows during started.
func (p *scaleProf) wait() { p.wg.Wait() }
