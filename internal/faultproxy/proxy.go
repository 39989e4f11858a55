package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds the dial to the target for each accepted connection.
const dialTimeout = 5 * time.Second

// mode is what the proxy does with the chunks it reads.
type mode int

const (
	modePass      mode = iota // forward at once
	modeDelay                 // forward after delay + up to jitter
	modeBlackhole             // read and discard, both ways
	modeRefuse                // reset new connections at once
	modeDetach                // refuse new connections; open ones were detached
)

// setting is one mode with its parameters, and the channel closed when it is
// replaced: a pump waiting out a delay wakes on it to apply the new mode.
type setting struct {
	mode          mode
	delay, jitter time.Duration
	changed       chan struct{} // closed by the next setMode; never sent on
}

// Proxy forwards TCP connections from Addr to a target, applying the
// current fault mode. It is safe for concurrent use: every method may be
// called from any goroutine, at any time, including concurrently with Close.
// After Close, mode methods do nothing, CutAfterRequest returns a closed
// channel and Stats keeps its final values.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context    // cancelled by Close: ends dials in progress
	cancel context.CancelFunc // called once, by Close

	mu       sync.Mutex         // guards everything below
	set      *setting           // current mode; replaced, never mutated
	links    map[*link]struct{} // open connections
	cutArmed bool               // a cut waits for the next client chunk
	cutMatch []byte             // the armed cut's needle; nil: any chunk
	cutDone  chan struct{}      // closed when the latest cut fired (or at Close)
	closed   bool
	stats    Stats // Open is len(links), filled in by Stats
	// statsChanged is closed, under mu, by every change to the counters or
	// the open connections, and replaced: WaitFor waits on it. Never sent on.
	statsChanged chan struct{}

	wg sync.WaitGroup // the accept goroutine and every link's goroutines
}

// New listens on 127.0.0.1 on a free port and proxies every connection it
// accepts to target ("host:port"), dialled when the connection is accepted.
// It returns an error when it cannot listen. The proxy starts in Pass mode.
func New(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faultproxy: target: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	close(done) // no cut armed yet
	p := &Proxy{
		target:  target,
		ln:      ln,
		ctx:     ctx,
		cancel:  cancel,
		set:     &setting{mode: modePass, changed: make(chan struct{})},
		links:   map[*link]struct{}{},
		cutDone: done,

		statsChanged: make(chan struct{}),
	}
	p.wg.Add(1)
	go p.accept() // exits when Close closes the listener
	return p, nil
}

// Addr returns the "127.0.0.1:port" clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Close stops accepting, resets every open connection (both sides), waits
// until every goroutine of the proxy has exited and fires an armed cut. It
// is idempotent; it returns the listener's close error, if any, the first
// time.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := p.snapshotLinks()
	if p.cutArmed {
		p.cutArmed = false
		close(p.cutDone)
	}
	p.mu.Unlock()

	p.cancel()
	err := p.ln.Close()
	for _, l := range links {
		l.reset()
	}
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("faultproxy: close listener: %w", err)
	}
	return nil
}

// Pass forwards every chunk at once (the initial mode). Chunks held by Delay
// are forwarded at once.
func (p *Proxy) Pass() { p.setMode(modePass, 0, 0) }

// Delay forwards each chunk, both ways, after d plus a uniformly random
// extra of up to jitter. Order within a direction is kept, so a connection's
// throughput drops to one chunk per delay. Negative durations count as 0.
func (p *Proxy) Delay(d, jitter time.Duration) { p.setMode(modeDelay, max(d, 0), max(jitter, 0)) }

// Blackhole models a partition: connections are accepted and read, both
// ways, but nothing is forwarded until the mode changes, and what was read
// meanwhile (including chunks held by Delay) is discarded, never delivered
// later. Clients see their requests time out.
func (p *Proxy) Blackhole() { p.setMode(modeBlackhole, 0, 0) }

// Refuse closes new connections at once with a reset and resets every open
// connection now; it lasts until the mode changes.
func (p *Proxy) Refuse() {
	p.setMode(modeRefuse, 0, 0)
	p.ResetAll()
}

// Detach models a client whose abort never reaches the server: every open
// connection's client side is reset now (the client sees ECONNRESET), while
// its server side stays open. Nothing more is sent to the server on it (not
// even the end of the stream), and whatever the server sends from then on
// (the late replies to requests it had already received) is read and
// discarded, counted in Stats.Dropped, until the server closes it, ResetAll
// or Close. New connections are refused (reset at once) until the mode
// changes, so that nothing the client sends afterwards (a reconnection, a
// PostgreSQL cancel request) reaches the server either. Connections stay
// detached when the mode changes.
//
// A server that holds a request back (Valkey's CLIENT PAUSE, a PostgreSQL
// statement waiting for a row lock) thus executes it later, with no client
// left to hear the outcome: WaitFor a rise in Dropped tells when it replied.
func (p *Proxy) Detach() {
	p.setMode(modeDetach, 0, 0)
	p.mu.Lock()
	links := p.snapshotLinks()
	p.mu.Unlock()
	p.count(func(s *Stats) { s.Detached += int64(len(links)) })
	for _, l := range links {
		l.detach()
	}
}

// ResetAll resets every open connection now (the client sees ECONNRESET,
// the server a reset too); the mode is unchanged and new connections are
// accepted as the mode says.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := p.snapshotLinks()
	p.mu.Unlock()
	p.count(func(s *Stats) { s.Resets += int64(len(links)) })
	for _, l := range links {
		l.reset()
	}
}

// CutAfterRequest arms a one-shot cut that models "committed, reply lost":
// the next chunk any client sends is forwarded to the server; the first
// bytes the server sends back on that connection are swallowed and the
// client connection is reset (the server side is closed). It returns a
// channel that is closed once the cut has fired: the client connection has
// been reset, or it ended before the server replied, or the proxy was
// closed. Calling it again while a cut is armed returns the same channel.
//
// The cut hits whichever connection sends next, whatever it sends: a
// client library's own traffic (pgxpool pings a connection idle for more
// than a second before handing it out, valkey-go pings an idle
// connection every second) takes it instead of the request under test.
// [Proxy.CutAfterRequestContaining] cuts only the request that carries
// given bytes.
func (p *Proxy) CutAfterRequest() <-chan struct{} { return p.arm(nil) }

// MaxNeedle is the longest needle [Proxy.CutAfterRequestContaining] takes.
const MaxNeedle = 1 << 10

// CutAfterRequestContaining is [Proxy.CutAfterRequest] for the first
// request that contains needle: the cut is claimed by the first chunk a
// client sends in which needle ends (a needle split across two chunks of
// one connection counts), and chunks without it pass as the mode says,
// on any connection. So a test cuts the request that names its lease (its
// owner id, its key) and no ping or health check of the client library in
// between. An empty needle matches every chunk; a needle longer than
// MaxNeedle panics (a test's mistake). Calling it while a cut is armed
// returns that cut's channel and keeps that cut's needle.
func (p *Proxy) CutAfterRequestContaining(needle []byte) <-chan struct{} {
	if len(needle) > MaxNeedle {
		panic("faultproxy: needle longer than MaxNeedle")
	}
	return p.arm(bytes.Clone(needle))
}

// arm arms a cut for the first client chunk that contains needle (any
// chunk if needle is empty) and returns its channel.
func (p *Proxy) arm(needle []byte) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.cutArmed {
		return p.cutDone
	}
	p.cutArmed = true
	p.cutMatch = needle
	p.cutDone = make(chan struct{})
	return p.cutDone
}

// CutDone returns the channel of the latest CutAfterRequest: closed once
// that cut has fired. Before any CutAfterRequest it is a closed channel.
func (p *Proxy) CutDone() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cutDone
}

// Stats are the proxy's counters since New.
type Stats struct {
	Accepted int64 // connections accepted (including refused ones)
	Refused  int64 // connections reset at once because of Refuse, or because the target could not be dialled
	Open     int   // connections open now
	Resets   int64 // connections reset by ResetAll and Refuse
	Detached int64 // connections detached by Detach
	Cuts     int64 // cuts fired
	ToServer int64 // bytes forwarded from clients to the server
	ToClient int64 // bytes forwarded from the server to clients
	Dropped  int64 // bytes read and discarded (Blackhole, swallowed and detached replies)
}

// Stats returns a consistent snapshot of the counters. A chunk is counted
// once it has been written to its destination (or discarded).
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statsLocked()
}

func (p *Proxy) statsLocked() Stats {
	s := p.stats
	s.Open = len(p.links)
	return s
}

// WaitFor blocks until cond holds for the proxy's Stats, so that a test can
// order events without sleeping: e.g. wait until the proxy has discarded a
// request in Blackhole before healing, or until a client has connected. cond
// is called with no lock held, on the caller's goroutine, once at first and
// after every change. It returns nil once cond holds, or ctx's error. After
// Close the counters no longer change: a cond that does not hold then waits
// for ctx.
func (p *Proxy) WaitFor(ctx context.Context, cond func(Stats) bool) error {
	for {
		p.mu.Lock()
		s, changed := p.statsLocked(), p.statsChanged
		p.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("faultproxy: wait for stats: %w", ctx.Err())
		}
	}
}

// count applies f to the counters and wakes WaitFor.
func (p *Proxy) count(f func(*Stats)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.stats)
	p.notifyLocked()
}

// notifyLocked wakes WaitFor; the caller holds p.mu.
func (p *Proxy) notifyLocked() {
	close(p.statsChanged)
	p.statsChanged = make(chan struct{})
}

func (p *Proxy) setMode(m mode, d, jitter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	close(p.set.changed)
	p.set = &setting{mode: m, delay: d, jitter: jitter, changed: make(chan struct{})}
}

func (p *Proxy) current() *setting {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.set
}

// snapshotLinks copies the open links; the caller holds p.mu.
func (p *Proxy) snapshotLinks() []*link {
	out := make([]*link, 0, len(p.links))
	for l := range p.links {
		out = append(out, l)
	}
	return out
}

// accept runs until Close closes the listener, handing every connection to
// a link.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed (or broken beyond repair)
		}
		conn := c.(*net.TCPConn)

		p.mu.Lock()
		p.stats.Accepted++
		if p.closed || p.set.mode == modeRefuse || p.set.mode == modeDetach {
			p.stats.Refused++
			p.notifyLocked()
			p.mu.Unlock()
			resetConn(conn)
			continue
		}
		l := &link{p: p, client: conn, done: make(chan struct{})}
		p.links[l] = struct{}{}
		p.notifyLocked()
		p.wg.Add(1)
		p.mu.Unlock()
		go l.run() // exits when both directions have ended
	}
}

// remove forgets a finished link.
func (p *Proxy) remove(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.notifyLocked()
	p.mu.Unlock()
}

// claimCut takes the armed cut, if any, for l when chunk (the next client
// chunk l forwards) matches the cut's needle; it runs on l's
// client-to-server pump.
func (p *Proxy) claimCut(l *link, chunk []byte) (chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cutArmed || !l.sent.endsIn(chunk, p.cutMatch) {
		return nil, false
	}
	p.cutArmed = false
	p.cutMatch = nil
	return p.cutDone, true
}

// resetConn closes c so that the peer sees a reset (RST), not an orderly FIN.
func resetConn(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}
