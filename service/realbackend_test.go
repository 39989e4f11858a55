package service_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/service"
	"github.com/leasekit/lease/simtest"
)

// Real servers are started on first use and stopped after the leak check.
var (
	valkeyOnce, postgresOnce         sync.Once
	valkeyAddr, postgresURL          string
	valkeySkipReason, postgresReason string
)

func realValkey(t *testing.T) string {
	t.Helper()
	valkeyOnce.Do(func() {
		addr, stop, err := testserver.Redis()
		stopsMu.Lock()
		stops = append(stops, stop)
		stopsMu.Unlock()
		valkeyAddr = addr
		valkeySkipReason = testserver.SkipReason("valkey", testserver.EnvValkeyAddr, err)
	})
	if valkeySkipReason != "" {
		t.Skip(valkeySkipReason)
	}
	return valkeyAddr
}

func realPostgres(t *testing.T) string {
	t.Helper()
	postgresOnce.Do(func() {
		url, stop, err := testserver.Postgres()
		stopsMu.Lock()
		stops = append(stops, stop)
		stopsMu.Unlock()
		postgresURL = url
		postgresReason = testserver.SkipReason("postgres", testserver.EnvPostgresURL, err)
	})
	if postgresReason != "" {
		t.Skip(postgresReason)
	}
	return postgresURL
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// TestRealBackendHandOff runs the hand-off scenario in real time on Valkey
// and PostgreSQL (each candidate with its own connection): after the
// leader crashes another leads within TTL + Retry (plus scheduling slack);
// after a clean Stop within one Retry (release notification: Valkey
// pub/sub, PostgreSQL LISTEN/NOTIFY).
func TestRealBackendHandOff(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time scenario on real servers")
	}
	t.Run("valkey", func(t *testing.T) {
		addr := realValkey(t)
		prefix := randomName("svctest-")
		realHandOff(t, func(t *testing.T) leaseapi.Backend {
			c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
			if err != nil {
				t.Fatalf("valkey client: %v", err)
			}
			t.Cleanup(c.Close)
			s, err := valkey.New(c, valkey.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		url := realPostgres(t)
		opts := postgres.Options{Schema: randomName("svc_")}
		ctx := t.Context()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Errorf("drop schema: %v", err)
				return
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{opts.Schema}.Sanitize()+" CASCADE"); err != nil {
				t.Errorf("drop schema: %v", err)
			}
		})
		migrated := false
		realHandOff(t, func(t *testing.T) leaseapi.Backend {
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			if !migrated {
				if err := postgres.Migrate(ctx, pool, opts); err != nil {
					t.Fatalf("Migrate: %v", err)
				}
				migrated = true
			}
			s, err := postgres.New(pool, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		})
	})
}

func realHandOff(t *testing.T, backend func(t *testing.T) leaseapi.Backend) {
	p := policy(t, leaseapi.PolicyOptions{TTL: time.Second, SafetyMargin: 200 * time.Millisecond, RenewEvery: 250 * time.Millisecond,
		Retry: 100 * time.Millisecond, Wait: 5 * time.Second, OperationTimeout: 300 * time.Millisecond})
	const slack = 300 * time.Millisecond // real scheduling and round trips
	type cand struct {
		name   string
		faulty *simtest.Faulty
		single *service.Singleton
	}
	key := leaseapi.MustKey("svc", randomName("leader-"))
	started := make(chan *cand, 16)
	var cs []*cand
	for _, name := range []string{"a", "b", "c"} {
		c := &cand{name: name, faulty: simtest.NewFaulty(backend(t))}
		client, err := runtime.NewClient(c.faulty, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.faulty.SetMode(simtest.Pass)
			_ = client.Close(context.Background())
		})
		c.single, err = service.New(client, service.Options{Key: key, Policy: p,
			OnStartedLeading: func(leaseapi.Token) { started <- c },
			Run:              waitDone,
		})
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		if err := c.single.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range cs {
			_ = c.single.Stop(context.Background())
		}
	}()
	next := func(within time.Duration) (*cand, time.Duration) {
		t.Helper()
		began := time.Now()
		tm := time.NewTimer(within + slack)
		defer tm.Stop()
		select {
		case c := <-started:
			return c, time.Since(began)
		case <-tm.C:
			t.Fatalf("no new leader within %v", within+slack)
			return nil, 0
		}
	}
	first, _ := next(time.Second)
	_ = pause(t.Context(), 500*time.Millisecond)
	first.faulty.SetMode(simtest.Down)
	second, took := next(p.TTL() + p.Retry())
	if second == first {
		t.Fatal("the crashed leader led again")
	}
	t.Logf("take-over after a crash: %v", took.Round(time.Millisecond))
	_ = pause(t.Context(), 300*time.Millisecond)
	if err := second.single.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	third, took := next(p.Retry())
	if third == first || third == second {
		t.Fatalf("leader %s after the clean stop of %s", third.name, second.name)
	}
	t.Logf("take-over after a clean stop: %v", took.Round(time.Millisecond))
}
