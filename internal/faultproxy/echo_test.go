package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// echoServer echoes every chunk back and reports it on got; on EOF from the
// client it half-closes its side.
type echoServer struct {
	ln  net.Listener
	got chan string // every chunk received; buffered, never closed

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // the accept goroutine and one per connection
}

// newEcho starts an echo server on loopback, closed when the test ends.
func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, got: make(chan string, 1024), conns: map[net.Conn]struct{}{}}
	e.wg.Add(1)
	go e.accept()
	t.Cleanup(e.close)
	return e
}

func (e *echoServer) addr() string { return e.ln.Addr().String() }

func (e *echoServer) accept() {
	defer e.wg.Done()
	for {
		c, err := e.ln.Accept()
		if err != nil {
			return
		}
		e.mu.Lock()
		e.conns[c] = struct{}{}
		e.wg.Add(1)
		e.mu.Unlock()
		go e.serve(c)
	}
}

func (e *echoServer) serve(c net.Conn) {
	defer e.wg.Done()
	defer func() {
		e.mu.Lock()
		delete(e.conns, c)
		e.mu.Unlock()
		c.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			select {
			case e.got <- string(buf[:n]):
			default:
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			_ = c.(*net.TCPConn).CloseWrite()
			return
		}
		if err != nil {
			return
		}
	}
}

func (e *echoServer) close() {
	e.ln.Close()
	e.mu.Lock()
	for c := range e.conns {
		c.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
}
