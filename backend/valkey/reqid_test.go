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
// the keys, as a bulk string (the scripts' one-line replies). It is how a
// test makes the connection deliver a reply that does not belong to the
// request, which a real server never does on its own.
type scriptedServer struct {
	ln    net.Listener
	reply atomic.Pointer[func(args []string) string]
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

// store returns a Store on a client of s, both closed when t ends.
func (s *scriptedServer) store(t *testing.T) *valkey.Store {
	t.Helper()
	c, err := vk.NewClient(vk.ClientOption{
		InitAddress: []string{s.ln.Addr().String()}, ForceSingleClient: true,
		AlwaysRESP2: true, DisableCache: true, ClientSetInfo: vk.DisableClientSetInfo,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	st, err := valkey.New(c, valkey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// answer sets the reply to every later script call.
func (s *scriptedServer) answer(f func(args []string) string) { s.reply.Store(&f) }

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
			v := (*s.reply.Load())(cmd[3+nkeys:])
			fmt.Fprintf(w, "$%d\r\n%s\r\n", len(v), v)
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
	s := srv.store(t)

	key := leaseapi.MustKey("reqid", "k")
	now := time.Now().UnixMilli() * 1000 // a whole millisecond, as grants are

	// The server time in a reply to another request is not learnt: the
	// Store has no observation of the server's clock before, nor after.
	srv.answer(func(args []string) string { return fmt.Sprintf("6 1 %d", now+3600e6) }) // late, an hour ahead, id 1
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

	// Each operation, the reply its script gives on success (status and
	// payload of its one-line reply),
	// and the kind a reply bound to another request must give.
	es := strconv.FormatInt(exp/1000-1, 10) // the expiry in replies: ms, minus 1
	ops := []struct {
		name            string
		status, payload string
		call            func() error
		kind            error
	}{
		{"TryAcquire", "1", "7 " + es, func() error {
			got, err := s.TryAcquire(ctx, key, ownerA, time.Second)
			if err == nil && (got.Token != 7 || !got.ExpiresAt.Equal(rec.ExpiresAt)) {
				return fmt.Errorf("granted token %d until %v, want 7 until %v", got.Token, got.ExpiresAt, rec.ExpiresAt)
			}
			return err
		}, leaseapi.ErrAmbiguousOutcome},
		{"Renew", "1", es, func() error { _, err := s.Renew(ctx, rec, time.Second); return err }, leaseapi.ErrAmbiguousOutcome},
		{"RenewBatch", "1", es + " 11", func() error {
			res := s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: time.Second}, {Record: rec, TTL: time.Second}})
			return errors.Join(res[0].Err, res[1].Err)
		}, leaseapi.ErrAmbiguousOutcome},
		{"Release", "1", "", func() error { return s.Release(ctx, rec) }, leaseapi.ErrAmbiguousOutcome},
		{"Guard", "1", "", func() error { return s.Guard(ctx, rec, cacheKey, "v", 0) }, leaseapi.ErrAmbiguousOutcome},
		{"Validate", "1", es + " 1000000:7:" + ownerA, func() error {
			got, err := s.Validate(ctx, rec)
			if err == nil && got != rec {
				return fmt.Errorf("validate: %+v, want %+v", got, rec)
			}
			return err
		}, leaseapi.ErrBackendUnavailable},
		{"Inspect", "5", "9", func() error {
			got, held, err := s.Inspect(ctx, key)
			if err == nil && (held || got.Token != 9) {
				return fmt.Errorf("inspect: %+v held %v, want free at token 9", got, held)
			}
			return err
		}, leaseapi.ErrBackendUnavailable},
	}
	// The id a reply carries, given the request's (its last argument);
	// "" for none.
	ids := []struct {
		name string
		id   func(req string) string
		ok   bool
	}{
		{"its own id", func(req string) string { return req }, true},
		{"another id", func(req string) string { n, _ := strconv.ParseInt(req, 10, 64); return strconv.FormatInt(n+1, 10) }, false},
		{"no id", func(string) string { return "" }, false},
		{"id 0", func(string) string { return "0" }, false},
	}
	for _, op := range ops {
		for _, id := range ids {
			srv.answer(func(args []string) string {
				req := args[len(args)-1]
				if n, err := strconv.ParseInt(req, 10, 64); err != nil || n <= 0 || n >= 1<<53 {
					t.Errorf("%s: request id argument %q, want an integer in [1, 2^53)", op.name, req)
				}
				got := id.id(req)
				fields := []string{op.status}
				if got != "" {
					fields = append(fields, got)
				}
				if op.payload != "" {
					fields = append(fields, op.payload)
				}
				return strings.Join(fields, " ")
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

// TestReleaseOfAnEndedGrantAsksTheCounter: a Release whose script finds no
// live grant (status 8: nothing written) asks the token counter in a
// second, read-only call, with the record's token and an id of its own.
// Its answer decides: the grant was the latest (nil) or a later one exists
// (ErrStaleOwner); a reply to another request, like any failure of that
// read, is ErrBackendUnavailable, never ambiguous, since nothing was
// written.
func TestReleaseOfAnEndedGrantAsksTheCounter(t *testing.T) {
	srv := newScriptedServer(t)
	s := srv.store(t)
	now := time.Now().UnixMilli() * 1000
	rec := leaseapi.Record{Key: leaseapi.MustKey("reqid", "ended"), Owner: ownerA, Token: 7,
		AcquiredAt: time.UnixMicro(now), ExpiresAt: time.UnixMicro(now + time.Second.Microseconds())}
	for _, tc := range []struct {
		name  string
		reply func(id string) string // the counter script's
		want  error                  // kind; nil for success
	}{
		{"no later grant", func(id string) string { return "4 " + id }, nil},
		{"a later grant", func(id string) string { return "3 " + id }, leaseapi.ErrStaleOwner},
		{"reply to another request", func(id string) string { return "4 1" + id }, leaseapi.ErrBackendUnavailable},
		{"not a reply of the script", func(id string) string { return "1 " + id }, leaseapi.ErrBackendUnavailable},
	} {
		var ids []string
		var mu sync.Mutex
		srv.answer(func(args []string) string {
			id := args[len(args)-1]
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
			if len(args) != 2 {
				t.Errorf("%s: script arguments %q, want 2", tc.name, args)
			}
			if strings.Contains(args[0], ":") { // the expected value: the release script
				return "8 " + id
			}
			if args[0] != "7" {
				t.Errorf("%s: the counter script got token %q, want 7", tc.name, args[0])
			}
			return tc.reply(id)
		})
		err := s.Release(t.Context(), rec)
		if tc.want == nil && err != nil || tc.want != nil && leaseapi.Kind(err) != tc.want {
			t.Errorf("%s: Release: %v, want %v", tc.name, err, tc.want)
		}
		mu.Lock()
		if len(ids) != 2 || ids[0] == ids[1] {
			t.Errorf("%s: request ids %q, want two calls with distinct ids", tc.name, ids)
		}
		mu.Unlock()
	}
}
