package postgres

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// How a Store call ends when its ctx does, without pgx's per-statement
// context watcher.
//
// pgx arms a watcher for every statement whose ctx can end (ctx.Done() is
// not nil): a channel, a context.AfterFunc registration with the ctx and
// two closures, four allocations per statement, and a lock of the ctx's
// parent shared by every call under it. The runtime's calls all have such
// a ctx (a deadline from OperationTimeout, shared by the calls of one
// time slot, see internal/callctx). So the Store carries the ctx to the
// connection itself:
//
//   - The ctx's deadline becomes the deadline of the connection's socket
//     (net.Conn.SetDeadline) for the time of the call, and is cleared
//     after it. A statement still running at the deadline fails with a
//     timeout, on which pgx closes the connection (the pool never hands
//     it out again) and sends the server a cancel request: what pgx's
//     default context handler (pgconn.DeadlineContextWatcherHandler) does
//     when the ctx ends, but at the deadline itself rather than when the
//     ctx's Done closes, which for a shared ctx can be later.
//   - ctx.Done() is watched once per distinct channel, for all the calls
//     in flight under it, by one context.AfterFunc: when the channel
//     closes (a cancel, or the parent ending), every socket of those calls
//     gets a deadline in the past, with the same effect.
//   - pgx is given a view of ctx that cannot end (its Done is nil, its
//     values are ctx's), so it arms nothing.
//
// A failure of a statement after its ctx ended (or its deadline passed)
// is reported with the context's error in its chain, as pgx reports it,
// so that classify maps it the same way: ambiguous for a mutation, the
// context's error for a read. A ctx already done, or past its deadline,
// before the first statement sends nothing and returns the context's
// error. A ctx whose Done is nil (context.Background) is passed to pgx
// as it is: pgx watches nothing for it either.
//
// A pool configured with a context watcher handler of its own
// (pgconn.Config.BuildContextWatcherHandler, e.g. a cancel request before
// the deadline) does not see the Store's calls end: they end as with the
// default handler.

// callKey is the key of a connection's *call in its CustomData.
const callKey = "github.com/leasekit/lease/backend/postgres.call"

// maxIdleGroups bounds the watched Done channels that have no call in
// flight. The oldest idle one beyond it is no longer watched (its
// AfterFunc is stopped), so that contexts that never end cannot pile up;
// a later call under it watches it again. A watch of a context of the
// context package (or derived from one) is an entry in its parent's list
// of children; only a ctx of a type of its own whose Done the context
// package cannot follow costs a goroutine (context.AfterFunc's), which
// ends when the ctx does or the watch is evicted.
const maxIdleGroups = 32

// calls watches the Done channels of a Store's calls. It is safe for
// concurrent use; mu guards every field and every group's and call's
// links.
type calls struct {
	mu     sync.Mutex
	groups map[<-chan struct{}]*doneGroup
	idle   doneGroup // sentinel of the ring of groups without calls, newest first
	nIdle  int
}

// doneGroup is one watched Done channel and the calls in flight under it.
type doneGroup struct {
	w          *calls
	done       <-chan struct{}
	stop       func() bool
	fired      bool
	head       *call // calls in flight (a list through call.next)
	n          int
	prev, next *doneGroup // in w.idle while n == 0 and not fired
}

// call is the state of one connection's current call; a pgxpool.Conn is
// its acquirer's alone, so there is at most one. It is made once per
// connection and kept in the connection's CustomData.
type call struct {
	conn  *pgxpool.Conn
	nc    net.Conn
	ctx   context.Context // the caller's
	view  unending        // what pgx is given when ctx can end
	dl    time.Time       // ctx's deadline, if hasDl
	hasDl bool
	group *doneGroup

	// budget holds the not-after parameter of the call's mutation (see
	// budget in postgres.go), passed as a pointer without an allocation.
	budget notAfter

	// under group.w.mu
	prev, next *call
}

// unending is a view of a ctx that never ends: pgx arms no watcher for it.
type unending struct{ context.Context }

func (unending) Done() <-chan struct{} { return nil }
func (unending) Err() error            { return nil }

// pastDeadline ends every read or write on a socket at once.
var pastDeadline = time.Unix(1, 0)

func newCalls() *calls {
	w := &calls{groups: make(map[<-chan struct{}]*doneGroup)}
	w.idle.prev, w.idle.next = &w.idle, &w.idle
	return w
}

// begin starts the call of c under ctx. On error nothing was sent (the
// error is the context's, as pgconn reports an already done ctx), and c
// is still the caller's to release.
func (w *calls) begin(ctx context.Context, c *pgxpool.Conn) (*call, error) {
	pc := c.Conn().PgConn()
	data := pc.CustomData()
	cl, _ := data[callKey].(*call)
	if cl == nil {
		cl = &call{nc: pc.Conn()}
		data[callKey] = cl
	}
	cl.conn, cl.ctx = c, ctx
	done := ctx.Done()
	if done == nil {
		return cl, nil
	}
	cl.dl, cl.hasDl = ctx.Deadline()
	if err := ctx.Err(); err != nil {
		cl.conn, cl.ctx = nil, nil
		return nil, notSent{err}
	}
	if cl.hasDl {
		if !time.Now().Before(cl.dl) {
			cl.conn, cl.ctx = nil, nil
			return nil, notSent{context.DeadlineExceeded}
		}
		_ = cl.nc.SetDeadline(cl.dl)
	}
	w.add(ctx, done, cl)
	// A cancel before the group was watching (or as it fired) would be
	// missed: look again, now that a later one cannot be.
	if err := ctx.Err(); err != nil {
		cl.end()
		cl.conn, cl.ctx = nil, nil
		return nil, notSent{err}
	}
	cl.view.Context = ctx
	return cl, nil
}

// add registers cl under done's group, making the group (and its watch)
// if there is none. A group in the map has not fired (fire removes it
// under w.mu), and a watch made for a ctx already done fires after add
// returns: either way fire sees cl.
func (w *calls) add(ctx context.Context, done <-chan struct{}, cl *call) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.groups[done]
	if g == nil {
		g = &doneGroup{w: w, done: done}
		w.groups[done] = g
		g.stop = context.AfterFunc(ctx, g.fire)
	} else if g.n == 0 {
		g.unlinkIdle()
	}
	cl.group, cl.prev, cl.next = g, nil, g.head
	if g.head != nil {
		g.head.prev = cl
	}
	g.head = cl
	g.n++
}

// fire ends every call in flight under g: its Done channel closed. The
// group is forgotten; a later call under the same channel finds its ctx
// done before it sends anything.
func (g *doneGroup) fire() {
	w := g.w
	w.mu.Lock()
	defer w.mu.Unlock()
	g.fired = true
	if w.groups[g.done] == g {
		delete(w.groups, g.done)
	}
	if g.n == 0 && g.next != nil {
		g.unlinkIdle()
	}
	for cl := g.head; cl != nil; cl = cl.next {
		_ = cl.nc.SetDeadline(pastDeadline)
	}
}

// unlinkIdle takes g out of the idle ring (under w.mu).
func (g *doneGroup) unlinkIdle() {
	g.prev.next, g.next.prev = g.next, g.prev
	g.prev, g.next = nil, nil
	g.w.nIdle--
}

// ctxFor is the ctx to give pgx for the call's statements.
func (cl *call) ctxFor() context.Context {
	if cl.group == nil {
		return cl.ctx
	}
	return &cl.view
}

// failed returns err, the failure of one of the call's statements, with
// the context's error in its chain if the statement timed out because
// the ctx ended or its deadline passed (pgx does the same for the ctx it
// watches: see classify).
func (cl *call) failed(err error) error {
	var ne net.Error
	if err == nil || cl.group == nil || !errors.As(err, &ne) || !ne.Timeout() {
		return err
	}
	cause := cl.ctx.Err()
	if cause == nil && cl.hasDl && !time.Now().Before(cl.dl) {
		cause = context.DeadlineExceeded
	}
	if cause == nil {
		return err
	}
	return &endedError{err: err, cause: cause}
}

// end unregisters the call and clears its socket's deadline, unless pgx
// closed the connection: its closing goroutine has set a deadline of its
// own.
func (cl *call) end() {
	g := cl.group
	if g == nil {
		return
	}
	w := g.w
	w.mu.Lock()
	if cl.prev != nil {
		cl.prev.next = cl.next
	} else {
		g.head = cl.next
	}
	if cl.next != nil {
		cl.next.prev = cl.prev
	}
	cl.prev, cl.next, cl.group = nil, nil, nil
	g.n--
	var evict *doneGroup
	if g.n == 0 && !g.fired {
		g.prev, g.next = &w.idle, w.idle.next
		w.idle.next.prev = g
		w.idle.next = g
		w.nIdle++
		if w.nIdle > maxIdleGroups {
			evict = w.idle.prev
			evict.unlinkIdle()
			delete(w.groups, evict.done)
		}
	}
	w.mu.Unlock()
	if evict != nil {
		evict.stop() // if it already fired, fire finds it forgotten
	}
	if !cl.conn.Conn().IsClosed() {
		_ = cl.nc.SetDeadline(time.Time{})
	}
}

// release ends the call and gives its connection back to the pool.
func (cl *call) release() {
	cl.end()
	cl.ctx, cl.view.Context = nil, nil
	c := cl.conn
	cl.conn = nil
	c.Release()
}

// notSent is the error of a call whose ctx was done before anything was
// sent: safe to retry, and the context's error.
type notSent struct{ cause error }

func (e notSent) Error() string     { return "context done before sending: " + e.cause.Error() }
func (e notSent) Unwrap() error     { return e.cause }
func (e notSent) SafeToRetry() bool { return true }

// endedError is a statement's failure after its ctx ended: the driver's
// error, and the context's.
type endedError struct{ err, cause error }

func (e *endedError) Error() string   { return e.err.Error() }
func (e *endedError) Unwrap() []error { return []error{e.err, e.cause} }
