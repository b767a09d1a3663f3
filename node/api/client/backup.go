package client

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
)

// Saved is what Backup received: the backup's header, its length and the
// SHA-256 of all of it (as sha256sum prints it for the file).
type Saved struct {
	wire.BackupHeader
	Bytes  uint64
	SHA256 [sha256.Size]byte
	Addr   string // the address that served it
}

// Backup fetches a backup of the cluster's state (GET /v1/cluster/backup,
// admin token; SPEC §3.4) and writes every byte of it to w as it arrives.
// It returns once the whole backup has arrived and verified (length,
// SHA-256, nothing after it); any other outcome is an error, and what w got
// must then be thrown away (write to a temporary file, keep it only on
// success). Only the leader serves it: given several addresses, the client
// moves past the ones that answer not_leader or cannot be reached, as for
// any op, for up to WithFailover. ctx bounds all of it (the HTTP client's
// own timeout does not: a backup may take long).
func (c *Client) Backup(ctx context.Context, w io.Writer) (*Saved, error) {
	const path = "/v1/cluster/backup"
	hc := c.long()
	start := time.Now()
	b := backoff{first: roundFirst, cap: roundCap}
	var last error
	var fails []string
	for {
		from := c.preferred()
		again := false
		fails = fails[:0]
		for k := range c.addrs {
			i := (from + k) % len(c.addrs)
			saved, err := c.backupFrom(ctx, hc, c.addrs[i], path, w)
			v := classify(err, false) // a GET changes nothing: never unknown
			var se *streamError
			if v == answered || errors.As(err, &se) {
				if err == nil {
					c.worked(i)
				}
				return saved, err
			}
			c.failed(i)
			if ctx.Err() != nil {
				return nil, ended(ctx, err, false)
			}
			last = err
			fails = append(fails, c.addrs[i]+": "+brief(err))
			again = again || v != notSoon
		}
		elapsed := time.Since(start)
		if !again || elapsed >= c.failover {
			break
		}
		if err := sleep(ctx, min(b.next(), c.failover-elapsed)); err != nil {
			return nil, ended(ctx, last, false)
		}
	}
	if len(c.addrs) > 1 {
		return nil, fmt.Errorf("client: GET %s: no address could serve it (%s): %w", path, strings.Join(fails, "; "), last)
	}
	return nil, last
}

// streamError is a failure after the answer began: w has part of a backup,
// so no other address may be tried.
type streamError struct{ err error }

func (e *streamError) Error() string { return e.err.Error() }
func (e *streamError) Unwrap() error { return e.err }

// backupFrom asks base for a backup and streams a 2xx answer into w.
func (c *Client) backupFrom(ctx context.Context, hc *http.Client, base, path string, w io.Writer) (*Saved, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if c.admin != "" {
		req.Header.Set("Authorization", "Bearer "+c.admin)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		return nil, answerError(resp.StatusCode, raw)
	}
	h, sum, err := wire.CopyBackup(w, resp.Body)
	if err != nil {
		return nil, &streamError{fmt.Errorf("client: GET %s from %s: %w", path, base, err)}
	}
	return &Saved{BackupHeader: *h, Bytes: h.Size(), SHA256: sum, Addr: base}, nil
}
