package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasekit/lease/internal/watchhub"
	"github.com/leasekit/lease/leaseapi"
)

// Listener tuning. The backoff between reconnection attempts starts at
// backoffMin and doubles up to backoffMax; it resets after a successful
// LISTEN. A connection idle for idleCheck is pinged (bounded by pingTimeout)
// so that a silently dead connection is replaced.
const (
	backoffMin  = 50 * time.Millisecond
	backoffMax  = 5 * time.Second
	idleCheck   = 30 * time.Second
	pingTimeout = 5 * time.Second
	closeWait   = 2 * time.Second
)

// WatchRelease implements [leaseapi.ReleaseWatcher]. The returned channel
// receives (buffer 1, coalescing) after a release of key is committed; stop
// removes the registration and may be called more than once.
//
// The first call starts the Store's one LISTEN connection on a goroutine
// that runs until [Store.Close]; WatchRelease itself does no I/O. The
// connection is taken from the pool with Acquire and Hijack (so the pool's
// hooks apply); it then no longer counts against the pool's MaxConns, so a
// watching Store uses at most MaxConns+1 server connections. The listener
// reconnects with bounded backoff. Every time it (re)establishes LISTEN it
// reads which watched keys are currently released or expired and wakes
// their watchers once, because a release may have happened while it was not
// listening (including between the first WatchRelease and the first
// LISTEN): such a wake can be spurious, and a waiter simply retries. Expiry
// is otherwise never notified. After Close the channel never receives.
func (s *Store) WatchRelease(key leaseapi.Key) (<-chan struct{}, func()) {
	if s.ready("watch release") != nil {
		return make(chan struct{}), func() {} // never receives
	}
	return s.watches.Watch(keyHash(key), key.String())
}

// Close stops the LISTEN goroutine, if one was started, closes its
// connection and waits for the goroutine to exit (bounded: the connection
// close is given closeWait). It does not close the pool, which the caller
// owns. Close is idempotent and returns nil (leaseapi.ErrInvalidState only
// on a Store that [New] did not make); after it, WatchRelease
// registers nothing and starts nothing, while the other operations keep
// working on the pool.
func (s *Store) Close() error {
	if err := s.ready("close"); err != nil {
		return err
	}
	s.watches.Close()
	return nil
}

// sweep wakes the watchers of every watched key that is currently released
// or expired: the releases a (re)connecting listener may have missed. One
// read on the listener's own connection.
func (s *Store) sweep(ctx context.Context, conn *pgx.Conn) error {
	// One key text per watched hash: every watcher of one hash watches the
	// same key (or collides harmlessly).
	keys := s.watches.Values()
	if len(keys) == 0 {
		return nil
	}
	rows, err := conn.Query(ctx, s.q.sweep, keys)
	if err != nil {
		return err
	}
	var k string
	_, err = pgx.ForEachRow(rows, []any{&k}, func() error {
		s.watches.Notify(keyHashString(k))
		return nil
	})
	return err
}

// listen is the listener goroutine: the listener of s.watches, run on the
// goroutine the first WatchRelease starts. It returns when ctx is canceled
// (by Close), after closing its connection.
func (s *Store) listen(ctx context.Context) {
	backoff := watchhub.Backoff{Min: backoffMin, Max: backoffMax}
	for {
		conn, err := s.listenConn(ctx)
		if err == nil {
			backoff.Reset()
			if s.sweep(ctx, conn) == nil {
				_ = s.receive(ctx, conn) // returns when the connection fails or ctx ends
			}
			cctx, cancel := context.WithTimeout(context.Background(), closeWait)
			_ = conn.Close(cctx)
			cancel()
		}
		if ctx.Err() != nil || !backoff.Wait(ctx) {
			return
		}
	}
}

// listenConn takes a connection out of the pool for good and LISTENs on it.
func (s *Store) listenConn(ctx context.Context) (*pgx.Conn, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), closeWait)
		_ = conn.Close(cctx)
		cancel()
		return nil, err
	}
	return conn, nil
}

// receive fans notifications out until the connection fails or ctx ends.
func (s *Store) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, idleCheck)
		n, err := conn.WaitForNotification(wctx)
		idle := wctx.Err() != nil && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			if n.Channel == s.channel {
				s.watches.Notify(n.Payload)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case idle && !conn.IsClosed():
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}
