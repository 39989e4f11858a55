package lifecycle

import (
	"context"
	"sync"
)

type state uint8

const (
	idle    state = iota // neither running nor stopped
	started              // Start's goroutines run (or ran: Start is once)
	serving              // a Serve call runs on its caller's goroutine
	stopped              // Stop was called: terminal
)

// Life is the start–stop state of an integration: Start runs functions on
// goroutines of their own, once; Serve runs one on the caller's goroutine
// and may be called again after it returned; Stop ends both for good. The
// zero value is idle and ready. It is safe for concurrent use.
//
// Life cancels nothing: the caller cancels the contexts its functions
// watch when it calls Stop, and waits on the channel Stop returns.
type Life struct {
	// mu guards st and done. done is made by Start or Serve and closed
	// exactly once when what they run has returned: by the goroutine Start
	// spawns once every function has returned, or by Serve before it
	// returns; nil while nothing runs.
	mu   sync.Mutex
	st   state
	done chan struct{}
}

// Idle reports whether neither Start nor Serve runs and Stop was not
// called.
func (l *Life) Idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st == idle
}

// Start runs each of fns on a goroutine of its own and returns true, if l
// is idle; otherwise (a second Start, Start while Serve runs, or Start after
// Stop) it starts nothing and returns false. Start never blocks. Each
// goroutine exits when its function returns; one more goroutine waits for
// them, closes the channel Stop returns and exits. l does not become idle
// again.
func (l *Life) Start(fns ...func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st != idle {
		return false
	}
	l.st = started
	done := make(chan struct{})
	l.done = done
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Go(fn)
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	return true
}

// Serve runs fn on the caller's goroutine and returns true once fn has
// returned, if l is idle; otherwise (Start ran, another Serve runs, or after
// Stop) it returns false at once without calling fn. After fn returns l is
// idle again, unless Stop was called meanwhile.
func (l *Life) Serve(fn func()) bool {
	l.mu.Lock()
	if l.st != idle {
		l.mu.Unlock()
		return false
	}
	l.st = serving
	done := make(chan struct{})
	l.done = done
	l.mu.Unlock()

	fn()

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st == serving {
		l.st = idle
	}
	l.done = nil
	close(done)
	return true
}

// Stop makes l stopped for good: Start and Serve return false from then on.
// It returns a channel that is closed once what Start or Serve runs has
// returned, or nil when nothing runs (Stop before Start, between two
// Serves). It does not block and is idempotent.
func (l *Life) Stop() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st = stopped
	return l.done
}

// Wait waits until done is closed (at once when it is nil) and returns nil,
// or until ctx ends first and returns ctx.Err().
func Wait(ctx context.Context, done <-chan struct{}) error {
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
