package netpoll

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Group is a set of epoll pollers and the connections and listeners
// registered on them. Its methods are safe for concurrent use.
type Group struct {
	cfg     Config   // as given to New
	set     settings // cfg resolved
	pollers []*poller
	next    atomic.Uint32 // round-robin cursor for new connections

	mu        sync.Mutex // guards closed and listeners
	closed    bool
	listeners map[*Listener]struct{}
}

// New starts a group of pollers configured by cfg, and by cfg alone: the
// NETPOLL environment variable configures only the default group
// (Default). A program that wants it for its own groups passes
// os.Getenv(EnvVar) to ParseConfig. New returns a *ConfigError for a bad
// or unsupported configuration.
func New(cfg Config) (*Group, error) {
	set, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	g := &Group{cfg: cfg, set: set, listeners: map[*Listener]struct{}{}}
	for i := range set.pollers {
		p, err := newPoller(i, set)
		if err == nil {
			if err = p.start(); err != nil {
				p.closeFDs()
			}
		}
		if err != nil {
			g.stopPollers()
			var ce *ConfigError
			if errors.As(err, &ce) {
				return nil, err
			}
			return nil, fmt.Errorf("netpoll: starting poller %d: %w", i, err)
		}
		g.pollers = append(g.pollers, p)
	}
	return g, nil
}

// pick returns the poller for a new connection.
func (g *Group) pick() *poller {
	if len(g.pollers) == 1 {
		return g.pollers[0]
	}
	return g.pollers[int(g.next.Add(1))%len(g.pollers)]
}

// Stats returns the counters a user watches. Like ReadStats it reads
// atomic counters and takes no lock, so a metrics scrape costs the same
// however many connections the group holds and never holds up Accept or
// Dial; each counter may be a moment old.
func (g *Group) Stats() Stats {
	t := g.counters().Total
	return Stats{Conns: t.Conns, Accepts: t.Accepts, Parks: t.ReadParks + t.WriteParks, Wakeups: t.Wakeups}
}

// ReadStats sets the Value of each sample to the group's statistic of that
// Name, summed over its pollers (AllStats lists the names). An unknown
// name, or a Server's, gets 0 and an error wrapping ErrUnknownStat; the
// other samples are read all the same.
func (g *Group) ReadStats(samples []Sample) error {
	c := g.counters()
	return readStats(samples, &statSource{g: &c, p: &c.Total}, false)
}

// ReadPollerStats is ReadStats for one poller, numbered from 0 to
// Pollers-1 in the order of the group's Config. The group-wide statistics
// read the same as through ReadStats.
func (g *Group) ReadPollerStats(poller int, samples []Sample) error {
	if poller < 0 || poller >= len(g.pollers) {
		return fmt.Errorf("netpoll: no poller %d in a group of %d", poller, len(g.pollers))
	}
	c := g.counters()
	return readStats(samples, &statSource{g: &c, p: &c.Pollers[poller]}, false)
}

// counters snapshots every counter of the group.
func (g *Group) counters() groupStats {
	s := groupStats{Pollers: make([]pollerStats, len(g.pollers))}
	for i, p := range g.pollers {
		s.Pollers[i] = p.stats()
		s.Total.add(&s.Pollers[i])
		if g.set.autoSpin {
			s.WakeCost = wakeCost()
			s.SpinBudget = max(s.SpinBudget, time.Duration(p.st.spinBudget.Load()))
			s.CPULimit = quota.cpus()
		}
	}
	return s
}

// Close closes every listener and connection of the group, stops its
// pollers and returns once every fd it owned is closed and every goroutine
// it started has returned. Blocked operations fail with net.ErrClosed.
func (g *Group) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return errGroupClosed
	}
	g.closed = true
	ls := g.listeners
	g.listeners = nil
	g.mu.Unlock()

	for l := range ls {
		l.Close()
	}
	for _, p := range g.pollers {
		for _, d := range p.table.closeAll() {
			d.close()
		}
	}
	g.stopPollers()
	return nil
}

func (g *Group) stopPollers() {
	for _, p := range g.pollers {
		p.stop()
	}
}

// Listen announces on a local address. Networks: tcp, tcp4, tcp6, unix.
// The context's cancellation applies to resolving the address.
func (g *Group) Listen(ctx context.Context, network, address string) (*Listener, error) {
	l, err := g.listen(ctx, network, address)
	if err != nil {
		var op *net.OpError
		if !errors.As(err, &op) {
			err = &net.OpError{Op: "listen", Net: network, Err: err}
		}
		return nil, err
	}
	return l, nil
}

// Dial connects to address. Networks: tcp, tcp4, tcp6, unix. The context's
// deadline and cancellation apply to resolving and connecting.
func (g *Group) Dial(ctx context.Context, network, address string) (*Conn, error) {
	return g.dial(ctx, network, address)
}
