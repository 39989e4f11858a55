package supervisor

import (
	goruntime "runtime"
	"sync"
	"sync/atomic"
)

// pool keeps the goroutines of actors that have exited, parked, so that
// the next lease of the same Config runs on one of them instead of a new
// goroutine. A new goroutine starts on a 2 KiB stack that every lease's
// first backend call grows again (a copy of the stack that walks its
// frames: about 11,000 instructions, a third of a TryAcquire+Release
// pair on the memory backend, more behind a driver's deeper calls); a
// parked goroutine keeps its grown stack until a garbage collection finds
// it idle and shrinks it.
//
// One goroutine still runs one lease at a time, for as long as the lease
// is held: a goroutine takes a lease only once the previous one's actor
// has exited (its final view published, Done closed, OnExit called). A
// goroutine parks only while another actor of its Config is running, so
// that once every lease has ended no goroutine of the Config is left (as
// without a pool: a client left unclosed, in a test under testing/synctest
// too, has no goroutine once its leases are over). A parked goroutine
// exits when it is dismissed (the last running actor ended: when the
// Config's Life ends, its actors release and end, and the last dismisses
// them), or at once if poolIdle goroutines are already parked, so that
// the pool never holds more than that many (and their stacks). It waits
// on the hand-off channel alone: a receive, not a select with a Life arm
// as it had, which cost about 950 instructions a pair (callgrind,
// BenchmarkTryAcquireReleaseHeld in runtime). One lease after another on a client that holds nothing else
// therefore gets no reuse; concurrent leases do.
//
// Only the wall clock (Config.WallClock) has a pool; any other clock is a
// test's, whose goroutines start and end with their leases.
type pool struct {
	// next hands a starting lease to a parked goroutine: unbuffered, so a
	// send succeeds only if one is waiting, and the lease is then its. A
	// nil dismisses the goroutine that receives it.
	next chan *Supervisor
	// live counts the actors running; parked the goroutines announced to
	// park (at most poolIdle). A goroutine announces itself and then reads
	// live; the last actor to end lowers live and then reads parked: one of
	// the two sees the other, so no goroutine stays parked past it.
	live, parked atomic.Int32
	// running counts every goroutine of the pool (Config.Wait).
	running sync.WaitGroup
}

// poolIdle bounds the parked goroutines of one Config: the leases started
// and ended concurrently (a burst of pairs from 64 goroutines needs 64),
// not the leases held.
const poolIdle = 256

func newPool() *pool { return &pool{next: make(chan *Supervisor)} }

// spawn runs s's actor: on a parked goroutine if one is waiting, else on a
// new goroutine of the pool (or, without a pool, a new goroutine).
func (s *Supervisor) spawn() {
	p := s.cfg.pool
	if p == nil {
		go s.run()
		return
	}
	p.live.Add(1)
	select {
	case p.next <- s:
		return
	default:
	}
	p.running.Add(1)
	go p.work(s)
}

// work is a pool goroutine: it runs the actor of s, then of every lease
// it is handed, until park says to exit. An actor whose goroutine ends
// inside run (a backend called runtime.Goexit or panicked; the actor's
// deferred exit has run) is still counted out, so that the goroutines
// parked meanwhile are dismissed once the other actors end.
func (p *pool) work(s *Supervisor) {
	defer p.running.Done()
	defer func() {
		if s != nil { // run did not return
			p.ended()
		}
	}()
	for s != nil {
		s.run()
		s = p.park()
	}
}

// ended counts an actor out; the last one dismisses the parked goroutines
// and reports true.
func (p *pool) ended() bool {
	if p.live.Add(-1) == 0 {
		p.dismiss()
		return true
	}
	return false
}

// park is called as an actor has ended; it waits for the next lease. nil
// means exit: this was the last running actor (the parked goroutines are
// dismissed), none is left running, the last one dismissed this
// goroutine, or poolIdle others are parked.
func (p *pool) park() *Supervisor {
	if p.ended() {
		return nil
	}
	if p.parked.Add(1) > poolIdle || p.live.Load() == 0 {
		p.parked.Add(-1)
		return nil
	}
	defer p.parked.Add(-1)
	return <-p.next
}

// dismiss ends the parked goroutines while no actor is running. A
// goroutine between its announcement and its receive is waited for: it
// sees live at zero and leaves, or receives. An actor that starts
// meanwhile ends the dismissal: the parked goroutines may serve it.
func (p *pool) dismiss() {
	for p.live.Load() == 0 && p.parked.Load() > 0 {
		select {
		case p.next <- nil:
		default:
			goruntime.Gosched()
		}
	}
}

// Wait returns once every goroutine the supervisors of cfg ran on has
// exited. Call it only after cfg.Life has ended and every supervisor's
// Done is closed, when no supervisor can start any more: the parked
// goroutines then exit at once.
func (cfg *Config) Wait() {
	if cfg.pool != nil {
		cfg.pool.running.Wait()
	}
}
