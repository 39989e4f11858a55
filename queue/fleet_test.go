package queue_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/queue"
	"github.com/leasekit/lease/simtest"
)

type handling struct {
	worker     string
	token      leaseapi.Token
	start, end time.Time
}

// TestWorkerFleet: three workers (concurrency 4 each, their own fault
// wrappers) consume 150 items from one at-least-once source whose
// visibility timeout (15s) is shorter than many handlers (up to 25s), so
// items are redelivered while being handled. Every tenth item fails on its
// first handling (nacked); one worker crashes after two minutes (its
// in-flight leases are lost, its handlers canceled, nothing acked). Every
// item must be acked exactly once, two handlings of one item never
// overlap, no worker exceeds its concurrency, and the history of grants,
// admissions and fenced writes (one resource per item) is clean.
func TestWorkerFleet(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store := backendtest.MemoryStore(t)
		src := newSource(t, 15*time.Second)
		hist := simtest.NewHistory()
		p := itemPolicy(t)
		const items = 150
		var mu sync.Mutex
		handlings := map[string][]handling{}
		resources := map[string]*simtest.Resource{}
		failedOnce := map[string]bool{}
		for i := range items {
			id := fmt.Sprint("item-", i)
			resources[id] = simtest.NewResource(id, hist)
			if err := src.Put(id, []byte(id)); err != nil {
				t.Fatal(err)
			}
		}
		duration := func(id string) time.Duration {
			h := fnv.New32a()
			h.Write([]byte(id))
			return time.Duration(1+h.Sum32()%25) * time.Second
		}
		type wk struct {
			name     string
			faulty   *simtest.Faulty
			ev       *events
			inFlight int
			maxIn    int
		}
		var workers []*wk
		for i := range 3 {
			c, f := newClient(t, store)
			x := &wk{name: fmt.Sprint("w", i), faulty: f, ev: &events{}}
			w, err := queue.New(c, src, queue.Options{
				Concurrency: 4, Policy: p, OnEvent: x.ev.add,
				Handler: func(ctx context.Context, it queue.Item, token leaseapi.Token) error {
					h := queue.HandleFrom(ctx)
					mu.Lock()
					x.inFlight++
					x.maxIn = max(x.maxIn, x.inFlight)
					hd := handling{worker: x.name, token: token, start: time.Now()}
					fail := it.ID[len(it.ID)-1] == '0' && !failedOnce[it.ID]
					failedOnce[it.ID] = true
					mu.Unlock()
					hist.Grant(h.Key(), h.Owner(), token, hd.start)
					defer func() {
						mu.Lock()
						defer mu.Unlock()
						x.inFlight--
						hd.end = time.Now()
						handlings[it.ID] = append(handlings[it.ID], hd)
					}()
					for left := duration(it.ID); left > 0; left -= 2 * time.Second {
						if h.State() == leaseapi.StateActive {
							now := time.Now()
							hist.Admit(h.Key(), h.Owner(), token, now)
							_ = resources[it.ID].Write(h.Owner(), token, x.name, now)
						}
						if err := pause(ctx, min(left, 2*time.Second)); err != nil {
							return err
						}
					}
					if fail {
						return errors.New("transient failure")
					}
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			backendtest.Start(t, w)
			workers = append(workers, x)
		}
		simtest.Advance(2 * time.Minute)
		workers[2].faulty.SetMode(simtest.Down)
		for range 120 {
			if src.Len() == 0 {
				break
			}
			simtest.Advance(30 * time.Second)
		}
		if n := src.Len(); n != 0 {
			t.Fatalf("%d items never acked", n)
		}
		if src.Acked() != items {
			t.Fatalf("acked %d, want %d", src.Acked(), items)
		}
		acks := 0
		var contended, lost, nacked int
		for _, x := range workers {
			acks += x.ev.count(queue.Acked)
			contended += x.ev.count(queue.Contended)
			lost += x.ev.count(queue.Lost)
			nacked += x.ev.count(queue.Nacked)
			if x.maxIn > 4 {
				t.Errorf("worker %s handled %d items at once, want at most 4", x.name, x.maxIn)
			}
		}
		if acks != items {
			t.Fatalf("%d Acked events, want %d (an item acked twice?)", acks, items)
		}
		if contended == 0 || lost == 0 || nacked < items/20 {
			t.Fatalf("scenario too thin: contended %d, lost %d, nacked %d", contended, lost, nacked)
		}
		mu.Lock()
		defer mu.Unlock()
		for id, hs := range handlings {
			sort.Slice(hs, func(i, j int) bool { return hs[i].start.Before(hs[j].start) })
			for i := 1; i < len(hs); i++ {
				if hs[i-1].end.After(hs[i].start) {
					t.Errorf("%s handled concurrently by %s [%v, %v] and %s from %v", id, hs[i-1].worker, hs[i-1].start, hs[i-1].end, hs[i].worker, hs[i].start)
				}
				if hs[i].token <= hs[i-1].token {
					t.Errorf("%s: tokens %d then %d", id, hs[i-1].token, hs[i].token)
				}
			}
		}
		if vs := hist.Check(); len(vs) > 0 {
			t.Fatalf("%d history violations, first: %v", len(vs), vs[0])
		}
		t.Logf("%d items acked; %d contended deliveries, %d lost, %d nacked", acks, contended, lost, nacked)
	})
}
