package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/tckclk/tckclk/bench/internal/load"
	"github.com/tckclk/tckclk/internal/clustertest"
	"github.com/tckclk/tckclk/internal/secret"
	"github.com/tckclk/tckclk/protocol"
)

// Item 4: the agent against its floor. The real `tckclk-agent --dev` and
// a bare one-line TCP server (this binary again, run as a separate
// process like the agent: reads up to the first LF, answers one fixed
// pre-signed line, closes) are driven by the same closed-loop clients,
// each exchange a full TCKCLK/2 one: connect, request line, read the
// response line to the LF, parse and verify the MAC (the bare line's
// fixed nonce is not compared with the request's; everything else is
// the same), close. Rounds alternate agent, bare, agent, bare, … for
// every client count.

// bareEnv names the listen address of the bare server mode of this
// binary; bareLineEnv the line it answers.
const (
	bareEnv     = "TCKBENCH_BARE_SERVER"
	bareLineEnv = "TCKBENCH_BARE_LINE"
)

// agentFloorTargets: the ratios need both within one figure.
const (
	floorThroughput = 0.9 // agent ≥ 0.9× the bare server's exchanges/s
	floorP99        = 1.2 // agent p99 ≤ 1.2× the bare server's
)

// floorRow is one client count's pooled figures.
type floorRow struct {
	Clients int         `json:"clients"`
	Agent   load.Result `json:"agent"`
	Bare    load.Result `json:"bare"`
}

type agentFloor struct {
	Rows     []floorRow `json:"rows"`
	Rounds   int        `json:"rounds"`
	Duration string     `json:"duration"`
}

// floorMet reports item 4's targets for one row.
func floorMet(r floorRow) (tput, p99 bool) {
	return r.Agent.CyclesPerS >= floorThroughput*r.Bare.CyclesPerS, r.Agent.P99Ms <= floorP99*r.Bare.P99Ms
}

// serveBare is the bare server mode: listen on addr, answer line to
// every request line, until killed.
func serveBare(addr, line string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return serveBareOn(ln, line)
}

// serveBareOn serves on ln until it is closed.
func serveBareOn(ln net.Listener, line string) error {
	answer := []byte(line + "\n")
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second)) // the agent's read_timeout_ms default
			if _, err := bufio.NewReaderSize(c, protocol.MaxLine+1).ReadSlice('\n'); err == nil {
				_, _ = c.Write(answer)
			}
		}()
	}
}

// exchanger does one TCKCLK/2 exchange per cycle against addr.
type exchanger struct {
	addr string
	keys protocol.KeyRing
	bare bool // the answer carries a fixed nonce: not compared
}

func (x exchanger) Cycle(ctx context.Context, _ int) error {
	nonce, err := protocol.NewNonce()
	if err != nil {
		return err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", x.addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(protocol.EncodeRequest(protocol.Request{Nonce: nonce})); err != nil {
		return err
	}
	line, err := readAnswer(c)
	if err != nil {
		return err
	}
	if !x.bare {
		_, err = protocol.ParseVerify(line, nonce, x.keys)
		return err
	}
	r, err := protocol.ParseResponseAny(line)
	if err != nil {
		return err
	}
	return x.keys.Verify(&r)
}

func (exchanger) Close() {}

// readAnswer reads an agent's answer: one line, then EOF (the agent
// closes after answering, SPEC §2.1).
func readAnswer(c net.Conn) ([]byte, error) {
	lr := protocol.NewLineReader(c)
	line, err := lr.ReadLine()
	if err == nil {
		err = lr.ExpectEOF()
	}
	return line, err
}

// writeSecret writes a fresh clock secret (48 random bytes, base64, as
// deploy/cluster-keys.sh makes them) to path, mode 0600.
func writeSecret(path string) error {
	b := make([]byte, 48)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(b)), 0o600)
}

// devKeys is the key ring a node told its agent is --dev verifies with.
func devKeys(secretFile string) (protocol.KeyRing, []byte, error) {
	s, err := secret.ReadFile(secretFile)
	if err != nil {
		return nil, nil, err
	}
	k := protocol.DevKey(s.Bytes())
	return protocol.KeyRing{protocol.NewKey(k)}, k, nil
}

func runAgentFloor(ctx context.Context, e *env, it itemOptions, stdout io.Writer) (*agentFloor, error) {
	k := len(e.procs)
	defer e.stopFrom(k)
	ports, err := clustertest.FreePorts(3)
	if err != nil {
		return nil, err
	}
	agentAddr, bareAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	sec := filepath.Join(e.dir, "floor.secret")
	if err := writeSecret(sec); err != nil {
		return nil, err
	}
	keys, key, err := devKeys(sec)
	if err != nil {
		return nil, err
	}
	if err := e.startDevAgent(ctx, "floor-agent", agentAddr, fmt.Sprintf("127.0.0.1:%d", ports[2]), sec); err != nil {
		return nil, err
	}
	// The bare line: a valid response under the same key, fixed nonce.
	fixed := protocol.Response{ReferenceUnixMs: uint64(time.Now().UnixMilli()), UncertaintyMs: 1, Synced: true, SourceAgeMs: 1}
	protocol.Sign(key, &fixed)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	line := protocol.EncodeResponse(&fixed)
	bare, err := e.start("floor-bare", []string{bareEnv + "=" + bareAddr, bareLineEnv + "=" + string(line[:len(line)-1])}, self)
	if err != nil {
		return nil, err
	}
	targets := []struct {
		label string
		x     exchanger
	}{{"agent", exchanger{addr: agentAddr, keys: keys}}, {"bare", exchanger{addr: bareAddr, keys: keys, bare: true}}}
	err = poll(ctx, 10*time.Second, []*proc{bare}, func() error {
		for _, t := range targets {
			if err := t.x.Cycle(ctx, 0); err != nil {
				return fmt.Errorf("%s: %w", t.label, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res := &agentFloor{Rounds: it.agentRounds, Duration: it.agentDuration.String()}
	for _, clients := range it.agentClients {
		var lat [2][]time.Duration
		var secs [2]float64
		var errs [2]int64
		var first [2]string
		for round := 1; round <= it.agentRounds; round++ {
			for i, t := range targets {
				r := load.Measure(ctx, t.label, t.x, clients, it.agentWarmup, it.agentDuration, nil)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				fmt.Fprintf(stdout, "agent floor %3d clients round %d  %-5s %8.0f exchanges/s  p50 %6.2f  p99 %6.2f ms  errors %d %s\n",
					clients, round, t.label, r.CyclesPerS, r.P50Ms, r.P99Ms, r.Errors, r.FirstError)
				lat[i] = append(lat[i], r.Measurement...)
				secs[i] += r.Seconds
				errs[i] += r.Errors
				if first[i] == "" {
					first[i] = r.FirstError
				}
			}
		}
		row := floorRow{Clients: clients}
		for i, dst := range []*load.Result{&row.Agent, &row.Bare} {
			*dst = load.Summarize(targets[i].label, clients, lat[i], secs[i], errs[i])
			dst.FirstError, dst.Measurement = first[i], nil
			if dst.Cycles == 0 {
				return nil, fmt.Errorf("%s, %d clients: no completed exchange: %s", targets[i].label, clients, first[i])
			}
		}
		res.Rows = append(res.Rows, row)
	}
	if bare.exited() {
		return nil, errors.New("the bare server exited during the run")
	}
	return res, nil
}
