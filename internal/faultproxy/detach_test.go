package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// holdServer accepts one connection and hands it to the test, which plays
// the server by hand.
func holdServer(t *testing.T) (addr string, conns <-chan *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *net.TCPConn, 1)
	done := make(chan struct{})
	go func() { // exits after the first accept or when the listener closes
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		ch <- c.(*net.TCPConn)
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		select {
		case c := <-ch:
			c.Close()
		default:
		}
	})
	return ln.Addr().String(), ch
}

// TestDetach: the client side is reset, the server side stays open and
// hears nothing more (not even an end of stream), what the server sends
// later is drained, new connections are refused, and the link ends when
// the server closes it.
func TestDetach(t *testing.T) {
	t.Parallel()
	addr, conns := holdServer(t)
	p := newProxy(t, addr)
	c := dial(t, p.Addr())
	write(t, c, "request")
	var srv *net.TCPConn
	select {
	case srv = <-conns:
	case <-time.After(testTimeout):
		t.Fatal("the proxy never dialled the server")
	}
	if err := srv.SetDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	readN(t, srv, "request")

	p.Detach()
	if err := readFails(t, c); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Fatalf("client read after Detach: %v; want a reset", err)
	}
	waitFor(t, p, "the detach", func(s Stats) bool { return s.Detached == 1 && s.Open == 1 })
	refused(t, p.Addr())

	// The server side is still open: the client's reset did not reach it.
	if err := srv.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := srv.Read(make([]byte, 16)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("server read after Detach: %v; want a timeout (nothing, not even EOF)", err)
	}
	// Its late reply is drained.
	before := p.Stats().Dropped
	write(t, srv, "late reply")
	waitFor(t, p, "the late reply to be drained", func(s Stats) bool { return s.Dropped == before+int64(len("late reply")) })
	if s := p.Stats(); s.ToClient != 0 {
		t.Errorf("stats %+v; want nothing forwarded to the client", s)
	}
	// The mode changes; the detached link stays detached.
	p.Pass()
	write(t, srv, "x")
	waitFor(t, p, "the second reply to be drained", func(s Stats) bool { return s.Dropped == before+int64(len("late reply")+1) })
	// The server ends the link.
	srv.Close()
	waitFor(t, p, "the link to end", func(s Stats) bool { return s.Open == 0 })
}

// TestDetachThenClose: Close resets a detached server side too.
func TestDetachThenClose(t *testing.T) {
	t.Parallel()
	addr, conns := holdServer(t)
	p := newProxy(t, addr)
	c := dial(t, p.Addr())
	write(t, c, "r")
	srv := <-conns
	if err := srv.SetDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	readN(t, srv, "r")
	p.Detach()
	waitFor(t, p, "the detach", func(s Stats) bool { return s.Detached == 1 })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := srv.Read(make([]byte, 1)); err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("server read after Close: %v; want a reset", err)
	}
}

// TestDetachAgainstRedis: a write held back by CLIENT PAUSE WRITE is
// executed when the pause ends although its client was reset meanwhile:
// the server never saw the client go.
func TestDetachAgainstRedis(t *testing.T) {
	t.Parallel()
	srv, p, c, _ := redisViaProxy(t)
	if _, err := srv.Do("CLIENT", "PAUSE", "60000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	before := p.Stats().ToServer
	write(t, c, "INCR token\r\n")
	waitFor(t, p, "the request to reach the server", func(s Stats) bool { return s.ToServer > before })
	p.Detach()
	readFails(t, c)
	dropped := p.Stats().Dropped
	if got, err := srv.Do("GET", "token"); err != nil || got != "41" {
		t.Fatalf("GET token during the pause = %q, %v; want 41", got, err)
	}
	if _, err := srv.Do("CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, "the late reply", func(s Stats) bool { return s.Dropped > dropped })
	if got, err := srv.Do("GET", "token"); err != nil || got != "42" {
		t.Fatalf("GET token = %q, %v; want 42: the held-back INCR must have run", got, err)
	}
}

// TestDetachAgainstPostgres: an UPDATE waiting for a row lock commits when
// the lock is released although its client was reset meanwhile.
func TestDetachAgainstPostgres(t *testing.T) {
	t.Parallel()
	srv, p := postgresViaProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	direct, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(context.Background())
	if _, err := direct.Exec(ctx, "CREATE TABLE fence (id int PRIMARY KEY, token bigint); INSERT INTO fence VALUES (1, 41)"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, srv.URLVia(p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	blocker, err := direct.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(context.Background())
	if _, err := blocker.Exec(ctx, "SELECT 1 FROM fence WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	before := p.Stats().ToServer
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, "UPDATE fence SET token = token + 1 WHERE id = 1")
		errc <- err
	}()
	waitFor(t, p, "the UPDATE to reach the server", func(s Stats) bool { return s.ToServer > before })
	p.Detach()
	if err := <-errc; err == nil {
		t.Fatal("the detached UPDATE reported success")
	}
	dropped := p.Stats().Dropped
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, "the late reply", func(s Stats) bool { return s.Dropped > dropped })
	var tok int64
	if err := direct.QueryRow(ctx, "SELECT token FROM fence WHERE id = 1").Scan(&tok); err != nil {
		t.Fatal(err)
	}
	if tok != 42 {
		t.Fatalf("token = %d; want 42: the held-back UPDATE must have committed", tok)
	}
}
