package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/leaseapi"
)

// A kit builds one backend's layers for the workloads.
type kit struct {
	name  string
	meter meter // the server's CPU, when known

	// single builds the layers of seq, par and renew on one shared
	// connection set (one valkey-go client, one pgx pool of 64
	// connections, one memory store), with leases of ttl, and a counted
	// Store of the same kind for the API's managed renewal. The floor
	// layer, when the backend has one (memory has none), comes first.
	single func(ctx context.Context, tag string, ttl time.Duration) (*layers, error)
	// handoff builds the contenders of each layer, each contender with
	// connections of its own.
	handoff func(ctx context.Context, tag string, sz sizes) ([]contenders, func(), error)
	// cleanup deletes the keys of tag (after a benchmark).
	cleanup func(ctx context.Context, tag string) error
}

// layers is what kit.single builds.
type layers struct {
	variants []variant
	managed  leaseapi.Backend // a counted Store for the API's managed renewal
	count    *renewCount      // managed's renewals
	ns       string           // managed's key namespace
	close    func()
}

// closers collects cleanups, run last first.
type closers []func()

func (c *closers) add(f func()) { *c = append(*c, f) }

func (c closers) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

var (
	procTag = func() string {
		var b [3]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
	tagSeq atomic.Int64
)

// newTag names the keys of one benchmark run: unique in this process and,
// with high probability, among processes sharing a server.
func newTag() string { return fmt.Sprintf("lb%s%d", procTag, tagSeq.Add(1)) }

// apiOn is the API on store b, its Client closed by cs.
func apiOn(b leaseapi.Backend, ns string, ttl time.Duration, cs *closers) (*apiLocker, error) {
	c, err := newClient(b, 0)
	if err != nil {
		return nil, err
	}
	cs.add(func() { closeClient(c) })
	return newAPILocker(c, ns, ttl)
}

// managedOn sets the counted store managed renewal runs on.
func managedOn(l *layers, counted leaseapi.Backend, n *renewCount, ns string) *layers {
	l.managed, l.count, l.ns = counted, n, ns
	return l
}

func valkeyKit(srv valkeyServer) kit {
	newStore := func(c vk.Client, prefix string, cs *closers) (*valkey.Store, error) {
		s, err := valkey.New(c, valkey.Options{Prefix: prefix})
		if err != nil {
			return nil, err
		}
		cs.add(s.Close)
		return s, nil
	}
	return kit{
		name: "valkey", meter: srv.meter,
		single: func(ctx context.Context, tag string, ttl time.Duration) (*layers, error) {
			var cs closers
			l, err := func() (*layers, error) {
				c, err := newValkeyClient(srv.addr)
				if err != nil {
					return nil, err
				}
				cs.add(c.Close)
				ss, err := newStore(c, tag+"s", &cs)
				if err != nil {
					return nil, err
				}
				sa, err := newStore(c, tag+"a", &cs)
				if err != nil {
					return nil, err
				}
				api, err := apiOn(sa, tag, ttl, &cs)
				if err != nil {
					return nil, err
				}
				l := &layers{variants: []variant{
					bindOne[floorValkeyHeld]("floor", newFloorValkey(c, tag+":f:", ttl)),
					bindOne[leaseapi.Record]("store", newStoreLocker(ss, tag, ttl)),
					bindOne[*lease.Handle]("api", api),
				}}
				sm, err := newStore(c, tag+"m", &cs)
				if err != nil {
					return nil, err
				}
				n := newRenewCount()
				return managedOn(l, countedValkey{sm, n}, n, tag), nil
			}()
			if err != nil {
				cs.run()
				return nil, err
			}
			l.close = cs.run
			return l, nil
		},
		handoff: func(ctx context.Context, tag string, sz sizes) ([]contenders, func(), error) {
			var cs closers
			out, err := func() ([]contenders, error) {
				var floors []*floorValkey
				var stores []*storeLocker
				var apis, waits []*apiLocker
				client := func() (vk.Client, error) {
					c, err := newValkeyClient(srv.addr)
					if err == nil {
						cs.add(c.Close)
					}
					return c, err
				}
				for range sz.contenders {
					c, err := client()
					if err != nil {
						return nil, err
					}
					floors = append(floors, newFloorValkey(c, tag+":f:", sz.ttl))
					if c, err = client(); err != nil {
						return nil, err
					}
					s, err := newStore(c, tag+"s", &cs)
					if err != nil {
						return nil, err
					}
					stores = append(stores, newStoreLocker(s, tag, sz.ttl))
					for _, v := range []struct {
						prefix string
						to     *[]*apiLocker
					}{{tag + "a", &apis}, {tag + "w", &waits}} {
						if c, err = client(); err != nil {
							return nil, err
						}
						s, err := newStore(c, v.prefix, &cs)
						if err != nil {
							return nil, err
						}
						a, err := apiOn(s, tag, sz.ttl, &cs)
						if err != nil {
							return nil, err
						}
						*v.to = append(*v.to, a)
					}
				}
				return []contenders{
					bindMany[floorValkeyHeld]("floor", floors, false),
					bindMany[leaseapi.Record]("store", stores, false),
					bindMany[*lease.Handle]("api", apis, false),
					bindMany[*lease.Handle]("acquire", waits, true),
				}, nil
			}()
			if err != nil {
				cs.run()
				return nil, nil, err
			}
			return out, cs.run, nil
		},
		cleanup: func(ctx context.Context, tag string) error {
			c, err := newValkeyClient(srv.addr)
			if err != nil {
				return err
			}
			defer c.Close()
			return unlinkTagged(ctx, c, tag)
		},
	}
}

// pgConns is the pool size of the single-client workloads, the peers
// harness's -pg-conns; handoff contenders get pgHandoffConns each.
const pgConns, pgHandoffConns = 64, 2

func postgresKit(srv postgresServer) kit {
	newStore := func(p *pgxpool.Pool, opts postgres.Options, cs *closers) (*postgres.Store, error) {
		s, err := postgres.New(p, opts)
		if err != nil {
			return nil, err
		}
		cs.add(func() { _ = s.Close() })
		return s, nil
	}
	pool := func(ctx context.Context, n int, cs *closers) (*pgxpool.Pool, error) {
		p, err := srv.pool(ctx, n)
		if err == nil {
			cs.add(p.Close)
		}
		return p, err
	}
	return kit{
		name: "postgres", meter: srv.meter,
		single: func(ctx context.Context, tag string, ttl time.Duration) (*layers, error) {
			var cs closers
			l, err := func() (*layers, error) {
				p, err := pool(ctx, pgConns, &cs)
				if err != nil {
					return nil, err
				}
				ss, err := newStore(p, srv.options(), &cs)
				if err != nil {
					return nil, err
				}
				sa, err := newStore(p, srv.options(), &cs)
				if err != nil {
					return nil, err
				}
				api, err := apiOn(sa, tag+"-a", ttl, &cs)
				if err != nil {
					return nil, err
				}
				l := &layers{variants: []variant{
					bindOne[floorPGHeld]("floor", newFloorPG(p, tag+":f:", ttl)),
					bindOne[leaseapi.Record]("store", newStoreLocker(ss, tag+"-s", ttl)),
					bindOne[*lease.Handle]("api", api),
				}}
				sm, err := newStore(p, srv.options(), &cs)
				if err != nil {
					return nil, err
				}
				n := newRenewCount()
				return managedOn(l, countedPG{sm, n}, n, tag+"-m"), nil
			}()
			if err != nil {
				cs.run()
				return nil, err
			}
			l.close = cs.run
			return l, nil
		},
		handoff: func(ctx context.Context, tag string, sz sizes) ([]contenders, func(), error) {
			var cs closers
			out, err := func() ([]contenders, error) {
				var floors []*floorPG
				var stores []*storeLocker
				var apis, waits []*apiLocker
				for range sz.contenders {
					p, err := pool(ctx, pgHandoffConns, &cs)
					if err != nil {
						return nil, err
					}
					floors = append(floors, newFloorPG(p, tag+":f:", sz.ttl))
					if p, err = pool(ctx, pgHandoffConns, &cs); err != nil {
						return nil, err
					}
					s, err := newStore(p, srv.options(), &cs)
					if err != nil {
						return nil, err
					}
					stores = append(stores, newStoreLocker(s, tag+"-s", sz.ttl))
					for _, v := range []struct {
						ns   string
						to   *[]*apiLocker
						opts postgres.Options
					}{{tag + "-a", &apis, srv.options()}, {tag + "-w", &waits, srv.waitOptions()}} {
						if p, err = pool(ctx, pgHandoffConns, &cs); err != nil {
							return nil, err
						}
						s, err := newStore(p, v.opts, &cs)
						if err != nil {
							return nil, err
						}
						a, err := apiOn(s, v.ns, sz.ttl, &cs)
						if err != nil {
							return nil, err
						}
						*v.to = append(*v.to, a)
					}
				}
				return []contenders{
					bindMany[floorPGHeld]("floor", floors, false),
					bindMany[leaseapi.Record]("store", stores, false),
					bindMany[*lease.Handle]("api", apis, false),
					bindMany[*lease.Handle]("acquire", waits, true),
				}, nil
			}()
			if err != nil {
				cs.run()
				return nil, nil, err
			}
			return out, cs.run, nil
		},
		cleanup: func(ctx context.Context, _ string) error { return srv.truncate(ctx) },
	}
}

// memoryKit has no floor and no server: the store is in this process, so
// its cost is all client CPU. Every layer of one benchmark shares one
// store, as clients of one server would.
func memoryKit() kit {
	return kit{
		name: "memory",
		single: func(ctx context.Context, tag string, ttl time.Duration) (*layers, error) {
			var cs closers
			s, err := memory.New(memory.Options{})
			if err != nil {
				return nil, err
			}
			api, err := apiOn(s, tag+"-a", ttl, &cs)
			if err != nil {
				cs.run()
				return nil, err
			}
			l := &layers{variants: []variant{
				bindOne[leaseapi.Record]("store", newStoreLocker(s, tag+"-s", ttl)),
				bindOne[*lease.Handle]("api", api),
			}}
			n := newRenewCount()
			managedOn(l, countedMemory{s, n}, n, tag+"-m")
			l.close = cs.run
			return l, nil
		},
		handoff: func(ctx context.Context, tag string, sz sizes) ([]contenders, func(), error) {
			var cs closers
			s, err := memory.New(memory.Options{})
			if err != nil {
				return nil, nil, err
			}
			var stores []*storeLocker
			var apis, waits []*apiLocker
			for range sz.contenders {
				stores = append(stores, newStoreLocker(s, tag+"-s", sz.ttl))
				for _, v := range []struct {
					ns string
					to *[]*apiLocker
				}{{tag + "-a", &apis}, {tag + "-w", &waits}} {
					a, err := apiOn(s, v.ns, sz.ttl, &cs)
					if err != nil {
						cs.run()
						return nil, nil, err
					}
					*v.to = append(*v.to, a)
				}
			}
			return []contenders{
				bindMany[leaseapi.Record]("store", stores, false),
				bindMany[*lease.Handle]("api", apis, false),
				bindMany[*lease.Handle]("acquire", waits, true),
			}, cs.run, nil
		},
		cleanup: func(context.Context, string) error { return nil },
	}
}
