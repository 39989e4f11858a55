package faultproxy

import (
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// chunkSize is the largest chunk a pump reads and forwards at once.
const chunkSize = 32 << 10

// direction names the way a pump forwards.
type direction int

const (
	toServer direction = iota // client → server
	toClient                  // server → client
)

// link is one proxied connection: the accepted client connection and the
// connection dialled to the target, with one pump goroutine per direction.
type link struct {
	p      *Proxy
	client *net.TCPConn
	done   chan struct{} // closed by reset: ends delays; never sent on

	mu      sync.Mutex   // guards server and isReset
	server  *net.TCPConn // nil until dialled
	isReset bool         // reset ran: a late dial result is discarded

	resetOnce sync.Once

	// detached is set by detach before it resets the client side: from
	// then on the server side is drained, never written or closed, until
	// the server ends it or reset runs.
	detached atomic.Bool

	// sent is the end of what the client sent so far: a cut's needle split
	// across two chunks is still found. Only the client-to-server pump
	// touches it.
	sent tail

	cutPending atomic.Bool   // a cut request went to the server on this link
	cutDone    chan struct{} // the claimed cut's channel; written before cutPending is set
	cutOnce    sync.Once
}

// run dials the target and pumps both directions until both have ended,
// then closes both connections. It runs on its own goroutine, counted in
// p.wg, and exits when the connection ends: by both peers closing, by an
// error, by a reset (ResetAll, Refuse, a cut) or by Close.
func (l *link) run() {
	p := l.p
	defer p.wg.Done()
	defer p.remove(l)
	defer l.fireCut() // a claimed cut fires however the link ends

	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		p.count(func(s *Stats) { s.Refused++ })
		l.reset()
		return
	}
	sc := c.(*net.TCPConn)
	l.mu.Lock()
	if l.isReset {
		l.mu.Unlock()
		resetConn(sc)
		return
	}
	l.server = sc
	l.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // exits when the server side reaches EOF or the link is reset
		defer wg.Done()
		l.pump(toClient, sc, l.client)
	}()
	l.pump(toServer, l.client, sc)
	wg.Wait()
	_ = l.client.Close()
	_ = sc.Close()
}

// pump reads chunks from src and delivers them to dst until src reaches EOF
// (then it half-closes dst, so the peer sees the end too) or an error or a
// reset ends the link.
func (l *link) pump(dir direction, src, dst *net.TCPConn) {
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.deliver(dir, buf[:n], dst) {
			l.end(dir)
			return
		}
		if errors.Is(err, io.EOF) {
			if dir == toClient || !l.detached.Load() {
				_ = dst.CloseWrite()
			}
			return
		}
		if err != nil {
			l.end(dir)
			return
		}
	}
}

// end finishes a pump that failed: it resets the link, except the
// client-to-server pump of a detached link, whose end must not reach the
// server.
func (l *link) end(dir direction) {
	if dir == toServer && l.detached.Load() {
		return
	}
	l.reset()
}

// deliver applies the current mode to one chunk. It returns false when the
// link must end (a write failed, the link was reset, a cut fired).
func (l *link) deliver(dir direction, chunk []byte, dst *net.TCPConn) bool {
	p := l.p
	for {
		if l.detached.Load() {
			if dir == toServer {
				return false // the client is gone; nothing more reaches the server
			}
			p.count(func(s *Stats) { s.Dropped += int64(len(chunk)) })
			return true
		}
		s := p.current()
		switch s.mode {
		case modeBlackhole, modeRefuse, modeDetach:
			p.count(func(s *Stats) { s.Dropped += int64(len(chunk)) })
			return true
		case modeDelay:
			wait := s.delay
			if s.jitter > 0 {
				wait += rand.N(s.jitter)
			}
			if wait < 0 { // overflowed: as good as forever
				wait = math.MaxInt64
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-s.changed:
				t.Stop()
				continue // apply the new mode to this chunk
			case <-l.done:
				t.Stop()
				return false
			}
		}
		return l.forward(dir, chunk, dst)
	}
}

// forward writes one chunk to dst, taking an armed cut on the way to the
// server and swallowing the reply on the way back.
func (l *link) forward(dir direction, chunk []byte, dst *net.TCPConn) bool {
	p := l.p
	switch dir {
	case toServer:
		if done, ok := p.claimCut(l, chunk); ok {
			l.cutDone = done
			l.cutPending.Store(true)
		}
		l.sent.add(chunk)
		if _, err := dst.Write(chunk); err != nil {
			return false
		}
		p.count(func(s *Stats) { s.ToServer += int64(len(chunk)) })
	case toClient:
		if l.cutPending.Load() {
			p.count(func(s *Stats) { s.Dropped += int64(len(chunk)) })
			l.reset() // the client sees a reset, not the reply
			l.fireCut()
			return false
		}
		if _, err := dst.Write(chunk); err != nil {
			if l.detached.Load() { // detached during the write: drain from now on
				p.count(func(s *Stats) { s.Dropped += int64(len(chunk)) })
				return true
			}
			return false
		}
		p.count(func(s *Stats) { s.ToClient += int64(len(chunk)) })
	}
	return true
}

// reset tears the link down with resets on both sides, ending both pumps
// and any delay. Idempotent; safe from any goroutine.
func (l *link) reset() {
	l.resetOnce.Do(func() {
		l.mu.Lock()
		l.isReset = true
		sc := l.server
		l.mu.Unlock()
		close(l.done)
		resetConn(l.client)
		if sc != nil {
			resetConn(sc)
		}
	})
}

// detach resets the client side only; see Proxy.Detach. A link already
// reset stays reset.
func (l *link) detach() {
	l.mu.Lock()
	isReset := l.isReset
	l.mu.Unlock()
	if isReset {
		return
	}
	l.detached.Store(true)
	resetConn(l.client)
}

// fireCut closes the claimed cut's channel, once, if this link claimed one.
func (l *link) fireCut() {
	if !l.cutPending.Load() {
		return
	}
	l.cutOnce.Do(func() {
		l.p.count(func(s *Stats) { s.Cuts++ })
		close(l.cutDone)
	})
}
