package valkey_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/resp"
	"github.com/leasekit/lease/leaseapi"
)

// scriptedServer is a minimal RESP2 server: it refuses HELLO (so that
// valkey-go speaks RESP2 and sends nothing else at connect) and answers
// every EVALSHA with reply(args), args being the command's arguments after
// the keys. It is how a test makes the connection deliver a reply that
// does not belong to the request, which a real server never does on its
// own.
type scriptedServer struct {
	ln    net.Listener
	reply atomic.Pointer[func(args []string) []int64]
	wg    sync.WaitGroup
}

func newScriptedServer(t *testing.T) *scriptedServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptedServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() { _ = ln.Close(); s.wg.Wait() })
	return s
}

// answer sets the reply to every later script call.
func (s *scriptedServer) answer(f func(args []string) []int64) { s.reply.Store(&f) }

func (s *scriptedServer) serve(c net.Conn) {
	defer c.Close()
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	for {
		cmd, err := resp.ReadCommand(r)
		if err != nil {
			return
		}
		if cmd == nil {
			continue
		}
		switch strings.ToUpper(cmd[0]) {
		case "EVALSHA", "EVAL":
			nkeys, _ := strconv.Atoi(cmd[2])
			vals := (*s.reply.Load())(cmd[3+nkeys:])
			fmt.Fprintf(w, "*%d\r\n", len(vals))
			for _, v := range vals {
				fmt.Fprintf(w, ":%d\r\n", v)
			}
		case "PING":
			w.WriteString("+PONG\r\n")
		default:
			fmt.Fprintf(w, "-ERR unknown command '%s'\r\n", cmd[0])
		}
		if w.Flush() != nil {
			return
		}
	}
}

// TestReplyOfAnotherRequest shows that every script reply is bound to its
// request: a reply that is well formed (a grant, a renewal, "released",
// "valid") but carries another request's id, or none, is never decoded as
// the answer. A mutation fails with ErrAmbiguousOutcome (the connection
// mixed replies up: nothing is known about ours), a read with
// ErrBackendUnavailable, and nothing is granted or confirmed. With the
// right id the same replies are accepted (the control).
func TestReplyOfAnotherRequest(t *testing.T) {
	srv := newScriptedServer(t)
	c, err := vk.NewClient(vk.ClientOption{
		InitAddress: []string{srv.ln.Addr().String()}, ForceSingleClient: true,
		AlwaysRESP2: true, DisableCache: true, ClientSetInfo: vk.DisableClientSetInfo,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := valkey.New(c, valkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	key := leaseapi.MustKey("reqid", "k")
	now := time.Now().UnixMicro()

	// The server time in a reply to another request is not learnt: the
	// Store has no observation of the server's clock before, nor after.
	srv.answer(func(args []string) []int64 { return []int64{6, now + 3600e6, 1} }) // late, an hour ahead, id 1
	if _, err := s.TryAcquire(context.Background(), key, ownerA, time.Second); leaseapi.Kind(err) != leaseapi.ErrAmbiguousOutcome {
		t.Fatalf("TryAcquire answered by another request's late reply: got %v, want ErrAmbiguousOutcome", err)
	}
	if b := valkey.BoundAt(s, time.Now().Add(time.Second)); b != 0 {
		t.Fatalf("after a reply to another request the Store sends the bound %d, want 0 (no observation)", b)
	}

	exp := now + time.Second.Microseconds()
	rec := leaseapi.Record{Key: key, Owner: ownerA, Token: 7,
		AcquiredAt: time.UnixMicro(now), ExpiresAt: time.UnixMicro(exp)}
	cacheKey, err := s.CacheKey(key, "c")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Each operation, the body of the reply its script gives on success,
	// and the kind a reply bound to another request must give.
	ops := []struct {
		name string
		body []int64
		call func() error
		kind error
	}{
		{"TryAcquire", []int64{1, 7, now, exp}, func() error {
			got, err := s.TryAcquire(ctx, key, ownerA, time.Second)
			if err == nil && got.Token != 7 {
				return fmt.Errorf("granted token %d, want 7", got.Token)
			}
			return err
		}, leaseapi.ErrAmbiguousOutcome},
		{"Renew", []int64{1, 7, now, exp}, func() error { _, err := s.Renew(ctx, rec, time.Second); return err }, leaseapi.ErrAmbiguousOutcome},
		{"RenewBatch", []int64{1, now, exp, 1, now, exp}, func() error {
			res := s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: time.Second}, {Record: rec, TTL: time.Second}})
			return errors.Join(res[0].Err, res[1].Err)
		}, leaseapi.ErrAmbiguousOutcome},
		{"Release", []int64{1}, func() error { return s.Release(ctx, rec) }, leaseapi.ErrAmbiguousOutcome},
		{"Guard", []int64{1}, func() error { return s.Guard(ctx, rec, cacheKey, "v", 0) }, leaseapi.ErrAmbiguousOutcome},
		{"Validate", []int64{1, now, exp}, func() error { _, err := s.Validate(ctx, rec); return err }, leaseapi.ErrBackendUnavailable},
		{"Inspect", []int64{5, 9}, func() error {
			got, held, err := s.Inspect(ctx, key)
			if err == nil && (held || got.Token != 9) {
				return fmt.Errorf("inspect: %+v held %v, want free at token 9", got, held)
			}
			return err
		}, leaseapi.ErrBackendUnavailable},
	}
	// The id a reply carries, given the request's (its last argument).
	ids := []struct {
		name string
		id   func(req int64) []int64
		ok   bool
	}{
		{"its own id", func(req int64) []int64 { return []int64{req} }, true},
		{"another id", func(req int64) []int64 { return []int64{req + 1} }, false},
		{"no id", func(int64) []int64 { return nil }, false},
		{"id 0", func(int64) []int64 { return []int64{0} }, false},
	}
	for _, op := range ops {
		for _, id := range ids {
			srv.answer(func(args []string) []int64 {
				req, err := strconv.ParseInt(args[len(args)-1], 10, 64)
				if err != nil || req <= 0 || req >= 1<<53 {
					t.Errorf("%s: request id argument %q, want an integer in [1, 2^53)", op.name, args[len(args)-1])
				}
				return append(append([]int64(nil), op.body...), id.id(req)...)
			})
			err := op.call()
			switch {
			case id.ok && err != nil:
				t.Errorf("%s, reply with %s: %v", op.name, id.name, err)
			case !id.ok && (leaseapi.Kind(err) != op.kind || !strings.Contains(fmt.Sprint(err), "reply to another request")):
				t.Errorf("%s, reply with %s: got %v, want %v (reply to another request)", op.name, id.name, err, op.kind)
			}
		}
	}
}
