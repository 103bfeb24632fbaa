package client

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// A client that runs commands one after another keeps one execution
// reservation in hand, taken while the previous command runs, so that a
// command costs one round trip to the agent instead of two. An agent with
// the feature "next-lease" sends it with the previous command's answer
// (see Ask); to another, the client sends a reservation request of its own. A reservation is
// an inert, expiring lease (protocol v2): one held and never used expires on
// the agent and starts nothing, and cordon-agent gives a spare's slot to any
// reservation asked for when it is full (feature "spare-leases").

// spareMaxAge bounds how long a spare reservation is trusted. The agent's
// lease (30 s by default) is longer; a spare the agent has already let go
// of is refused there (StaleLease) and the command is reserved afresh.
const spareMaxAge = 5 * time.Second

type spareLease struct {
	mu sync.Mutex
	id string
	// until is when this host stops trusting id.
	until time.Time
	// filling is closed when the reservation in flight lands.
	filling chan struct{}
	// used is set by the first Lease: a client's first command takes no
	// next spare, so a sandbox that runs one command reserves once, unless
	// the client was told commands are coming (eager, see Prefetch).
	used  bool
	eager bool
	// next: the agent sends the next spare with a command's answer when
	// asked (feature "next-lease", learnt at admission); asking: a command
	// in flight has asked, so that commands running at once do not all ask.
	next, asking bool
}

// Lease returns the id of a live reservation for a command about to start:
// the spare one when it is young enough (spare is then true), otherwise a
// fresh one. From a client's second command on, each Lease also takes the
// next spare in the background; a client's first command, often its only
// one, takes none. A command started with a spare that the agent refuses
// as StaleLease has started nothing and may be retried with a fresh
// reservation (Reserve).
func (c *Client) Lease(ctx context.Context) (id string, spare bool, err error) {
	l := &c.spare
	l.mu.Lock()
	second := l.used || l.eager
	l.used = true
	l.mu.Unlock()
	for {
		l.mu.Lock()
		if l.id != "" {
			id, fresh := l.id, time.Now().Before(l.until)
			l.id = ""
			if fresh {
				if second && !l.next {
					c.refillLocked()
				}
				l.mu.Unlock()
				return id, true, nil
			}
		}
		wait := l.filling
		if wait == nil {
			l.mu.Unlock()
			r, err := c.Reserve(ctx)
			if err != nil {
				return "", false, err
			}
			l.mu.Lock()
			if second && !l.next {
				c.refillLocked()
			}
			l.mu.Unlock()
			return r.ExecutionID, false, nil
		}
		l.mu.Unlock()
		// A spare is on its way: waiting for it costs no more than a new
		// reservation and leaves the agent one lease fewer to hold.
		select {
		case <-wait:
		case <-ctx.Done():
			return "", false, ctx.Err()
		}
	}
}

// RunLeased runs start on a reservation from Lease and returns the id it
// last ran with. start sends the command with ask's header and hands ask
// the answer's header as soon as it has it: that may carry the next spare.
// When start's error says the agent had let a spare go (StaleLease:
// nothing started), it runs once more on a fresh reservation.
func (c *Client) RunLeased(ctx context.Context, start func(id string, ask *Ask) error) (string, error) {
	id, spare, err := c.Lease(ctx)
	if err != nil {
		return "", err
	}
	ask := c.ask()
	defer ask.Answer(nil)
	err = start(id, ask)
	if spare && StaleLease(err) {
		r, rerr := c.Reserve(ctx)
		if rerr != nil {
			return "", rerr
		}
		id = r.ExecutionID
		err = start(id, ask)
	}
	return id, err
}

// An Ask is a command's request for the next spare reservation, sent with
// the command and answered with it (feature "next-lease"). A command asks
// only when the agent can answer, no spare is held or on its way, and no
// other command in flight has asked.
type Ask struct {
	c        *Client
	header   http.Header
	answered bool
}

func (c *Client) ask() *Ask {
	a := &Ask{c: c}
	l := &c.spare
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next && !l.asking && l.id == "" && l.filling == nil {
		l.asking = true
		a.header = http.Header{wire.LeaseHeader: {wire.LeaseNext}}
	}
	return a
}

// Header is what the command's request carries: nil when it does not ask
// (or a is nil).
func (a *Ask) Header() http.Header {
	if a == nil {
		return nil
	}
	return a.header
}

// Answer takes the spare the agent named in the header h of its answer to
// the command (200), if any; nil means the command got no such answer. Only
// the first call counts.
func (a *Ask) Answer(h http.Header) {
	if a == nil || a.header == nil {
		return
	}
	id, until, ok := parseNextLease(h.Get(wire.NextLeaseHeader))
	l := &a.c.spare
	l.mu.Lock()
	defer l.mu.Unlock()
	if a.answered {
		return
	}
	a.answered, l.asking = true, false
	if ok && l.id == "" {
		a.c.keepLocked(&wire.Reservation{ExecutionID: id, LeaseExpiresAt: until}, time.Now())
	}
}

// parseNextLease reads a wire.NextLeaseHeader value: an execution id and
// its lease's end in Unix milliseconds.
func parseNextLease(v string) (id string, until int64, ok bool) {
	id, ms, found := strings.Cut(v, " ")
	if !found || !wire.ValidExecutionID(id) {
		return "", 0, false
	}
	until, err := strconv.ParseInt(ms, 10, 64)
	return id, until, err == nil
}

// Prefetch takes a spare reservation in the background, unless one is held
// or on its way, and keeps one from then on, so that even the client's next
// command costs one round trip: for a caller that knows commands are coming
// (a daemon whose caller was just handed a sandbox).
func (c *Client) Prefetch() {
	c.spare.mu.Lock()
	c.spare.eager = true
	c.refillLocked()
	c.spare.mu.Unlock()
}

// refillLocked starts taking the next spare unless one is held or on its
// way. c.spare.mu is held.
func (c *Client) refillLocked() {
	l := &c.spare
	if l.id != "" || l.filling != nil {
		return
	}
	done := make(chan struct{})
	l.filling = done
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), spareMaxAge)
		defer cancel()
		start := time.Now()
		// Marked as a spare: an agent at capacity gives its slot to a
		// reservation someone asked for rather than refuse that one.
		r, err := c.reserve(ctx, http.Header{wire.LeaseHeader: {wire.LeaseSpare}})
		l.mu.Lock()
		defer l.mu.Unlock()
		l.filling = nil
		close(done)
		if err == nil {
			c.keepLocked(r, start)
		}
	}()
}

// keepLocked holds r as the spare, taken at start. c.spare.mu is held.
func (c *Client) keepLocked(r *wire.Reservation, start time.Time) {
	// Trust it for half the lease the agent granted, as this host's clock
	// sees it, and never past spareMaxAge.
	ttl := min(time.Until(time.UnixMilli(r.LeaseExpiresAt))/2, spareMaxAge)
	if ttl > 0 {
		c.spare.id, c.spare.until = r.ExecutionID, start.Add(ttl)
	}
}

// StaleLease reports whether err is the agent refusing an execution id as
// unknown or no longer reserved: a command that started nothing.
func StaleLease(err error) bool {
	var e *Error
	return errors.As(err, &e) &&
		(e.Status == http.StatusNotFound && e.Code == wire.CodeUnknownExecution ||
			e.Status == http.StatusConflict && e.Code == wire.CodeExecutionNotReserved)
}
