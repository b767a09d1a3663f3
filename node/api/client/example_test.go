package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"github.com/tckclk/tckclk/node"
	"github.com/tckclk/tckclk/node/api/client"
)

// ticketd starts a single-node ticketd in this process (what
// `ticketd --data-dir D --http ADDR` runs) and returns a client for it
// and a func that stops it. The examples need a server to talk to.
func ticketd() (*client.Client, func()) {
	dir, err := os.MkdirTemp("", "ticketd-example")
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.Cluster.Raft.DataDir = dir
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.RunWith(ctx, cfg, node.Deps{Listener: ln}) }()
	c, err := client.New(ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := c.Ready(context.Background()); err == nil {
			break
		} else if time.Now().After(deadline) {
			log.Fatalf("ticketd not ready: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling readiness
	}
	return c, func() {
		cancel()
		<-done
		os.RemoveAll(dir)
	}
}

// Acquire blocks until the ticket is free (first come, first served on
// the leader), retrying leader changes; ctx bounds the wait.
func ExampleClient_Acquire() {
	c, stop := ticketd()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first, err := c.Acquire(ctx, "orders.migration", "worker-1", 30)
	if err != nil {
		log.Fatal(err)
	}
	got := make(chan *client.Lease)
	go func() {
		l, err := c.Acquire(ctx, "orders.migration", "worker-2", 30) // waits for worker-1
		if err != nil {
			log.Fatal(err)
		}
		got <- l
	}()
	// worker-1 finishes; worker-2 gets the ticket as soon as it is
	// free, with a higher fencing token.
	if _, err := c.Release(ctx, "orders.migration", "worker-1", first.Token); err != nil {
		log.Fatal(err)
	}
	second := <-got
	fmt.Println(second.Holder, second.Token > first.Token)
	// Output: worker-2 true
}

// A Session keeps the ticket renewed; Done closes when its local deadline
// passes without a successful renew, so the work stops using the token
// before anyone else can be granted the ticket.
func ExampleSession() {
	c, stop := ticketd()
	defer stop()
	s, err := c.NewSession(context.Background(), "nightly-report", "host-a", 30)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background()) // releases

	work := func(ctx context.Context, token uint64) error {
		// Send token with every write to the guarded store; the store
		// rejects tokens below the highest it has seen (fencing).
		return nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), s.Deadline())
	defer cancel()
	go func() {
		select {
		case <-s.Done(): // lost: stop at once
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := work(ctx, s.Token()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("held until", s.Deadline().After(time.Now()), "token", s.Token() > 0)
	// Output: held until true token true
}

// TryGrant answers at once: ErrHeld when someone else has the ticket.
func ExampleClient_TryGrant() {
	c, stop := ticketd()
	defer stop()
	ctx := context.Background()
	if _, err := c.TryGrant(ctx, "leader-election", "a", 10); err != nil {
		log.Fatal(err)
	}
	_, err := c.TryGrant(ctx, "leader-election", "b", 10)
	fmt.Println(errors.Is(err, client.ErrHeld))
	// Output: true
}

// Watch is a blocking read: it answers when the ticket changes (its
// modify index passes the one given) or the wait runs out.
func ExampleClient_Watch() {
	c, stop := ticketd()
	defer stop()
	ctx := context.Background()
	l, err := c.Grant(ctx, "config-owner", "a", 30)
	if err != nil {
		log.Fatal(err)
	}
	w, err := c.Watch(ctx, "config-owner", 0, 0) // now, with its index
	if err != nil {
		log.Fatal(err)
	}
	changed := make(chan *client.Watched)
	go func() {
		next, err := c.Watch(ctx, "config-owner", w.Index, time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		changed <- next
	}()
	if _, err := c.Release(ctx, "config-owner", "a", l.Token); err != nil {
		log.Fatal(err)
	}
	next := <-changed
	fmt.Println("held:", next.Ticket != nil, "newer:", next.Index > w.Index)
	// Output: held: false newer: true
}
