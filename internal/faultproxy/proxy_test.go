package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/testserver"
)

// testTimeout bounds every wait in these tests: a hang fails, it does not
// stall the run.
const testTimeout = 10 * time.Second

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn)
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

// readN reads exactly len(want) bytes and compares.
func readN(t *testing.T, c net.Conn, want string) {
	t.Helper()
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %q: %v", want, err)
	}
	if string(buf) != want {
		t.Fatalf("read %q; want %q", buf, want)
	}
}

// roundTrip writes s and reads its echo.
func roundTrip(t *testing.T, c net.Conn, s string) {
	t.Helper()
	write(t, c, s)
	readN(t, c, s)
}

// readFails checks that the next read on c fails (the proxy reset or closed
// it) instead of returning data or timing out.
func readFails(t *testing.T, c net.Conn) error {
	t.Helper()
	n, err := c.Read(make([]byte, 16))
	if err == nil {
		t.Fatalf("read returned %d bytes; want an error", n)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("read timed out; want a reset or EOF")
	}
	return err
}

// refused checks that a connection to addr is reset: either at once (the
// dial reports the reset) or on the first read.
func refused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("dial: %v; want success or ECONNRESET", err)
		}
		return
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	readFails(t, c)
}

func waitFor(t *testing.T, p *Proxy, what string, cond func(Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := p.WaitFor(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v (stats %+v)", what, err, p.Stats())
	}
}

func waitChan(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testTimeout):
		t.Fatalf("%s did not happen within %v", what, testTimeout)
	}
}

func TestNewRejectsBadTarget(t *testing.T) {
	if _, err := New("no-port"); err == nil {
		t.Fatal("New(no-port) succeeded")
	}
}

func TestPass(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	p := newProxy(t, e.addr())
	if p.Target() != e.addr() {
		t.Errorf("Target = %q; want %q", p.Target(), e.addr())
	}
	c := dial(t, p.Addr())
	roundTrip(t, c, "hello")
	roundTrip(t, c, strings.Repeat("x", 200<<10)) // several chunks
	want := int64(5 + 200<<10)
	waitFor(t, p, "byte counts", func(s Stats) bool { return s.ToServer == want && s.ToClient == want })
	if s := p.Stats(); s.Accepted != 1 || s.Open != 1 || s.Dropped != 0 {
		t.Errorf("stats %+v; want 1 accepted, 1 open, 0 dropped", s)
	}
}

func TestHalfClosePropagates(t *testing.T) {
	_, p, c := setup(t)
	write(t, c, "bye")
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c) // the echo, then EOF from the server's half-close
	if err != nil || string(got) != "bye" {
		t.Fatalf("ReadAll = %q, %v; want bye, nil", got, err)
	}
	waitFor(t, p, "the connection to end", func(s Stats) bool { return s.Open == 0 })
}

func TestDelay(t *testing.T) {
	_, p, c := setup(t)
	const d = 50 * time.Millisecond
	p.Delay(d, 10*time.Millisecond)
	start := time.Now()
	roundTrip(t, c, "slow")
	if rtt := time.Since(start); rtt < 2*d {
		t.Errorf("round trip took %v; want at least %v (delay each way)", rtt, 2*d)
	}
}

// setup is every connection test's start: a parallel test, an echo server,
// a proxy to it and one client connection through the proxy.
func setup(t *testing.T) (*echoServer, *Proxy, *net.TCPConn) {
	t.Helper()
	t.Parallel()
	e := newEcho(t)
	p := newProxy(t, e.addr())
	return e, p, dial(t, p.Addr())
}

func TestPassReleasesDelayedChunk(t *testing.T) {
	_, p, c := setup(t)
	p.Delay(time.Hour, 0)
	write(t, c, "held")
	p.Pass() // the chunk held by Delay goes at once
	readN(t, c, "held")
}

func TestBlackholeDiscards(t *testing.T) {
	e, p, c := setup(t)
	roundTrip(t, c, "before")
	<-e.got

	p.Blackhole()
	write(t, c, "lost")
	waitFor(t, p, "the request to be discarded", func(s Stats) bool { return s.Dropped == 4 })
	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := c.Read(make([]byte, 16)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read during blackhole: %v; want a timeout", err)
	}
	if err := c.SetReadDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}

	// A new connection is accepted but gets nothing through either.
	c2 := dial(t, p.Addr())
	write(t, c2, "lost2")
	waitFor(t, p, "the second request to be discarded", func(s Stats) bool { return s.Dropped == 9 })

	p.Pass()
	roundTrip(t, c, "after") // not "lostafter": held bytes are never delivered
	roundTrip(t, c2, "again")
	if got := <-e.got; got != "after" && got != "again" {
		t.Errorf("server received %q after the blackhole; want after or again", got)
	}
}

func TestBlackholeDiscardsDelayedChunk(t *testing.T) {
	_, p, c := setup(t)
	p.Delay(time.Hour, 0)
	write(t, c, "held")
	waitFor(t, p, "the connection", func(s Stats) bool { return s.Open == 1 })
	p.Blackhole()
	waitFor(t, p, "the held chunk to be discarded", func(s Stats) bool { return s.Dropped == 4 })
	p.Pass()
	roundTrip(t, c, "next")
}

func TestCutAfterRequest(t *testing.T) {
	e, p, c := setup(t)
	roundTrip(t, c, "warm")
	<-e.got

	done := p.CutAfterRequest()
	if again := p.CutAfterRequest(); again != done {
		t.Error("arming twice returned another channel")
	}
	if p.CutDone() != done {
		t.Error("CutDone is not the armed cut's channel")
	}
	write(t, c, "commit")
	if got := <-e.got; got != "commit" {
		t.Fatalf("server received %q; want commit", got)
	}
	waitChan(t, done, "the cut")
	err := readFails(t, c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("client read after the cut: %v; want ECONNRESET", err)
	}
	if s := p.Stats(); s.Cuts != 1 || s.ToClient != 4 {
		t.Errorf("stats %+v; want 1 cut and only the warm-up reply forwarded", s)
	}

	// One shot: the next connection works.
	c2 := dial(t, p.Addr())
	roundTrip(t, c2, "fine")
}

// TestCutAfterRequestContaining: a cut with a needle lets requests
// without it through (a client library's ping, on this connection or
// another) and cuts the first one that carries it, also when the needle
// arrives split across two chunks.
func TestCutAfterRequestContaining(t *testing.T) {
	e, p, c := setup(t)
	other := dial(t, p.Addr())
	done := p.CutAfterRequestContaining([]byte("owner-7"))
	roundTrip(t, c, "PING owner-")
	<-e.got
	roundTrip(t, other, "PING")
	<-e.got
	select {
	case <-done:
		t.Fatal("the cut fired on a request without the needle")
	default:
	}
	write(t, c, "7 RENEW") // "owner-7" straddles the two chunks
	if got := <-e.got; got != "7 RENEW" {
		t.Fatalf("server received %q; want the second chunk", got)
	}
	waitChan(t, done, "the cut")
	if err := readFails(t, c); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("client read after the cut: %v; want ECONNRESET", err)
	}
	roundTrip(t, other, "still fine")
	if s := p.Stats(); s.Cuts != 1 {
		t.Errorf("Cuts = %d; want 1", s.Cuts)
	}
}

func TestTailFindsNeedles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sent, chunk, needle string
		want                bool
	}{
		{"", "abc", "", true},
		{"", "xabcx", "abc", true},
		{"xa", "bcx", "abc", true},
		{"ab", "c", "abc", true},
		{"abc", "x", "abc", false}, // ended before this chunk
		{"xb", "c", "abc", false},
		{"a", "b", "abc", false},
	} {
		var tl tail
		tl.add([]byte(tc.sent))
		if got := tl.endsIn([]byte(tc.chunk), []byte(tc.needle)); got != tc.want {
			t.Errorf("sent %q, chunk %q, needle %q: %v; want %v", tc.sent, tc.chunk, tc.needle, got, tc.want)
		}
	}
	// Only the last MaxNeedle-1 bytes are kept, however it was sent.
	var tl tail
	tl.add([]byte(strings.Repeat("x", 3*MaxNeedle)))
	for range 2 * MaxNeedle {
		tl.add([]byte("ab"))
	}
	if len(tl.b) != MaxNeedle-1 || !strings.HasSuffix(string(tl.b), "abab") {
		t.Errorf("kept %d bytes ending %q; want %d ending abab", len(tl.b), tl.b[len(tl.b)-4:], MaxNeedle-1)
	}
	long := strings.Repeat("n", MaxNeedle)
	tl.add([]byte(long[:MaxNeedle-1]))
	if !tl.endsIn([]byte("n"), []byte(long)) {
		t.Error("a MaxNeedle needle split across chunks not found")
	}
}

func TestCutWaitsOutBlackhole(t *testing.T) {
	_, p, c := setup(t)
	p.Blackhole()
	done := p.CutAfterRequest()
	write(t, c, "dropped")
	waitFor(t, p, "the discard", func(s Stats) bool { return s.Dropped == 7 })
	select {
	case <-done:
		t.Fatal("cut fired on a discarded chunk")
	default:
	}
	p.Pass()
	write(t, c, "req")
	waitChan(t, done, "the cut")
	readFails(t, c)
}

func TestCutFiresWhenConnectionEndsFirst(t *testing.T) {
	t.Parallel()
	// A target that reads but never answers, then closes.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() { // exits after one accept or when ln closes
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	p := newProxy(t, ln.Addr().String())
	c := dial(t, p.Addr())
	done := p.CutAfterRequest()
	write(t, c, "req")
	var sc net.Conn
	select {
	case sc = <-accepted:
	case <-time.After(testTimeout):
		t.Fatal("no connection reached the target")
	}
	waitFor(t, p, "the request", func(s Stats) bool { return s.ToServer == 3 })
	sc.Close() // the server goes away without a reply
	c.Close()  // and so does the client
	waitChan(t, done, "the cut")
}

func TestRefuse(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	p := newProxy(t, e.addr())
	old := dial(t, p.Addr())
	roundTrip(t, old, "up")

	p.Refuse()
	readFails(t, old)
	refused(t, p.Addr())
	waitFor(t, p, "the refusal", func(s Stats) bool { return s.Refused == 1 && s.Open == 0 })

	p.Pass()
	roundTrip(t, dial(t, p.Addr()), "back")
}

func TestResetAll(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	p := newProxy(t, e.addr())
	a, b := dial(t, p.Addr()), dial(t, p.Addr())
	roundTrip(t, a, "a")
	roundTrip(t, b, "b")
	p.ResetAll()
	for _, c := range []net.Conn{a, b} {
		if err := readFails(t, c); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("read after ResetAll: %v; want ECONNRESET", err)
		}
	}
	if s := p.Stats(); s.Resets != 2 {
		t.Errorf("Resets = %d; want 2", s.Resets)
	}
	roundTrip(t, dial(t, p.Addr()), "new") // the mode is still Pass
}

func TestTargetDown(t *testing.T) {
	t.Parallel()
	// A port that was free a moment ago may be taken by another listener
	// of a parallel run; a Refuser's port refuses by construction.
	r, err := testserver.NewRefuser()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	p := newProxy(t, r.Addr())
	refused(t, p.Addr())
	waitFor(t, p, "the refusal", func(s Stats) bool { return s.Refused == 1 && s.Open == 0 })
}

func TestCloseWithOpenConnections(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	p, err := New(e.addr())
	if err != nil {
		t.Fatal(err)
	}
	a := dial(t, p.Addr())
	roundTrip(t, a, "a")
	b := dial(t, p.Addr())
	p.Delay(time.Hour, 0)
	write(t, b, "held") // a pump waits out the delay
	done := p.CutAfterRequest()
	waitFor(t, p, "both connections", func(s Stats) bool { return s.Open == 2 })

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Open != 0 {
		t.Errorf("Open after Close = %d; want 0", s.Open)
	}
	readFails(t, a)
	readFails(t, b)
	waitChan(t, done, "the armed cut to be released by Close")

	// Everything after Close is harmless.
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	p.Pass()
	p.Blackhole()
	p.Delay(time.Second, 0)
	p.Refuse()
	p.ResetAll()
	waitChan(t, p.CutAfterRequest(), "CutAfterRequest after Close")
	// The listener is closed. (A dial to its address is no test: the port
	// is free now, and another listener of a parallel run may take it.)
	if _, err := p.ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept on the listener after Close: %v; want net.ErrClosed", err)
	}
}

func TestWaitForHonoursContext(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	p := newProxy(t, e.addr())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.WaitFor(ctx, func(s Stats) bool { return s.Accepted > 0 }); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitFor on a cancelled ctx: %v; want context.Canceled", err)
	}
}
