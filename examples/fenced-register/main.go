// Command fenced-register shows why a ticket's fencing token matters
// (SPEC §4, §4.2): a holder can be paused (GC, SIGSTOP, a slow disk) past
// its lease after it checked that it still holds the ticket, and then
// write. Only the store can refuse that late write, by remembering the
// highest token it has seen.
//
//	fenced-register store  --listen 127.0.0.1:8090
//	fenced-register worker --ticketd http://127.0.0.1:7980 --store http://127.0.0.1:8090 \
//	                       --name register --holder w1 --lease 10 --value hello [--step]
//
// The store takes PUT /register with the token in X-Fencing-Token and
// refuses (409) a token below the highest it has accepted. The worker
// holds the ticket with a client.Session, checks Done and its deadline,
// and writes its value with the token; with --step it waits for a line on
// stdin between the check and the write (where a pause hurts).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tckclk/tckclk/node/api/client"
)

// TokenHeader carries the fencing token of a write.
const TokenHeader = "X-Fencing-Token"

// Register is a one-value store that refuses stale fencing tokens.
type Register struct {
	mu      sync.Mutex
	highest uint64
	value   string
}

// ServeHTTP: GET returns the value and its token; PUT writes the body if
// the token is at least the highest seen, else 409.
func (r *Register) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/register" {
		http.NotFound(w, req)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch req.Method {
	case http.MethodGet:
		fmt.Fprintf(w, "%d %s\n", r.highest, r.value)
	case http.MethodPut:
		tok, err := strconv.ParseUint(req.Header.Get(TokenHeader), 10, 64)
		if err != nil || tok == 0 {
			http.Error(w, TokenHeader+" must be a fencing token (a positive integer)", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, 1<<16))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if tok < r.highest {
			http.Error(w, fmt.Sprintf("stale fencing token %d: %d was already used", tok, r.highest), http.StatusConflict)
			return
		}
		r.highest, r.value = tok, string(body)
		fmt.Fprintf(w, "stored with token %d\n", tok)
	default:
		w.Header().Set("Allow", "GET, PUT")
		http.Error(w, "GET or PUT", http.StatusMethodNotAllowed)
	}
}

// ErrStale is a write the store refused for its token.
var ErrStale = errors.New("the store refused a stale fencing token")

// Put writes value to the store at base with token.
func Put(ctx context.Context, base string, token uint64, value string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/register", strings.NewReader(value))
	if err != nil {
		return err
	}
	req.Header.Set(TokenHeader, strconv.FormatUint(token, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		return fmt.Errorf("%w: %s", ErrStale, strings.TrimSpace(string(msg)))
	}
	return fmt.Errorf("store: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
}

// worker holds the ticket and writes value once, fenced by the token.
func worker(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	addr := fs.String("ticketd", client.DefaultAddr, "ticketd API")
	store := fs.String("store", "http://127.0.0.1:8090", "the register's URL")
	name := fs.String("name", "register", "ticket name")
	holder := fs.String("holder", "", "holder")
	lease := fs.Int("lease", 10, "lease in seconds")
	value := fs.String("value", "", "what to write")
	step := fs.Bool("step", false, "wait for a line on stdin between the check and the write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := client.New(*addr)
	if err != nil {
		return err
	}
	s, err := c.NewSession(ctx, *name, *holder, *lease)
	if err != nil {
		return err
	}
	defer s.Close(context.Background())
	// The check every holder should make, and which is not enough alone:
	// a pause after it outlives the lease.
	select {
	case <-s.Done():
		return fmt.Errorf("lost the ticket before writing: %w", s.Err())
	default:
	}
	if !time.Now().Before(s.Deadline()) {
		return errors.New("the local deadline passed before writing")
	}
	fmt.Fprintf(stdout, "checked token %d\n", s.Token())
	if *step {
		if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := Put(wctx, *store, s.Token(), *value); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %q with token %d\n", *value, s.Token())
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fenced-register store --listen ADDR | worker --ticketd URL --store URL --holder H [--lease S] --value V [--step]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "store":
		fs := flag.NewFlagSet("store", flag.ExitOnError)
		listen := fs.String("listen", "127.0.0.1:8090", "address")
		_ = fs.Parse(os.Args[2:])
		err = http.ListenAndServe(*listen, &Register{})
	case "worker":
		err = worker(context.Background(), os.Args[2:], os.Stdin, os.Stdout)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fenced-register:", err)
		if errors.Is(err, ErrStale) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}
