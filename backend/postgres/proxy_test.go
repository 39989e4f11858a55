package postgres_test

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultMode is what the proxy does with traffic.
type faultMode int

const (
	modePass faultMode = iota
	// modeBlackhole accepts connections and data but forwards nothing in
	// either direction (a network partition that TCP does not notice).
	modeBlackhole
	// modeCutAfterRequest forwards the next client chunk (a whole pgx
	// request: pgx writes each request in one buffer) to the server, then
	// closes the client side at once: the statement runs, its reply is lost.
	// The proxy returns to modePass after one cut.
	modeCutAfterRequest
)

// proxy is a small in-process TCP proxy in front of the test server, for
// fault injection. It is safe for concurrent use; close stops every
// goroutine it started and waits for them.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	mode  faultMode
	conns map[net.Conn]struct{} // both sides of every proxied connection
	cuts  int                   // completed cuts
	// lastCut is closed when the server side of the latest cut connection
	// has replied or closed: the cut statement's fate is then decided.
	lastCut chan struct{}
	done    bool           // close was called
	wg      sync.WaitGroup // accept loop and pipe goroutines
}

// newProxy starts a proxy to the host:port of dbURL and returns it with the
// URL rewritten to go through it. It is closed when t ends.
func newProxy(t testing.TB, dbURL string) (*proxy, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse url: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	p := &proxy{ln: ln, target: u.Host, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept() // exits when ln is closed
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *proxy) set(m faultMode) {
	p.mu.Lock()
	p.mode = m
	p.mu.Unlock()
}

func (p *proxy) cutCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// waitCut returns once the server side of the latest cut connection has
// replied (or closed): the cut statement has committed or never will.
func (p *proxy) waitCut(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	ch := p.lastCut
	p.mu.Unlock()
	if ch == nil {
		t.Fatal("waitCut: nothing was cut")
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("waitCut: the server did not settle the cut statement within 10s")
	}
}

// link is the state one proxied connection's two pipes share.
type link struct {
	cut     atomic.Bool   // the client side was cut
	settled chan struct{} // closed by the server pipe when it ends after a cut
	once    sync.Once
}

// resetAll closes every connection proxied so far (as a healed partition's
// stale TCP connections eventually are); new connections are unaffected.
func (p *proxy) resetAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.done = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track registers both sides of a new connection; false after close.
func (p *proxy) track(client, server net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return false
	}
	p.conns[client] = struct{}{}
	p.conns[server] = struct{}{}
	return true
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client, server) {
			_ = client.Close()
			_ = server.Close()
			return
		}
		l := &link{settled: make(chan struct{})}
		p.wg.Add(2)
		go p.pipe(client, server, true, l)  // exits when either side closes
		go p.pipe(server, client, false, l) // exits when either side closes
	}
}

// pipe copies src to dst, applying the mode chunk by chunk. It closes both
// sides when it ends, except after a cut: then the server side stays open
// until the server's reply fails to reach the closed client (the other
// pipe closes it), so the server runs the request to completion.
func (p *proxy) pipe(src, dst net.Conn, fromClient bool, l *link) {
	defer p.wg.Done()
	cut := false
	defer func() {
		_ = src.Close()
		if !cut {
			_ = dst.Close()
		}
		if !fromClient && l.cut.Load() {
			l.once.Do(func() { close(l.settled) })
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			mode := p.mode
			if mode == modeCutAfterRequest && fromClient {
				p.mode = modePass
				p.cuts++
				p.lastCut = l.settled
				l.cut.Store(true)
			}
			p.mu.Unlock()
			switch mode {
			case modeBlackhole:
				continue // swallowed
			case modeCutAfterRequest:
				if fromClient {
					// The client loses the reply: close it before the
					// server can answer.
					_ = src.Close()
					cut = true
					_, _ = dst.Write(buf[:n])
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed side
		}
	}
}
