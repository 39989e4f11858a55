package valkey_test

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/testenv"
	"github.com/leasekit/lease/internal/testserver"
)

// TestMain checks that no goroutine outlives the tests and stops the
// private servers the tests started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(runner{m}, testenv.IgnoredLeaks...)
}

type runner struct{ m *testing.M }

func (r runner) Run() int {
	code := r.m.Run()
	stopAll()
	return code
}

const envAddr = "LEASE_TEST_VALKEY_ADDR"

var (
	sharedOnce sync.Once
	sharedAddr string
	sharedErr  error

	procsMu sync.Mutex
	procs   []*redisProc
)

func stopAll() {
	procsMu.Lock()
	defer procsMu.Unlock()
	for _, p := range procs {
		p.stop()
	}
	procs = nil
}

// serverAddr returns the address of the server most tests share: the one in
// LEASE_TEST_VALKEY_ADDR, or a private redis-server/valkey-server started
// once for this test binary. Without either it skips (naming the variable),
// or fails when LEASE_REQUIRE_BACKENDS=1.
func serverAddr(t testing.TB) string {
	t.Helper()
	if a := os.Getenv(envAddr); a != "" {
		return a
	}
	sharedOnce.Do(func() {
		var p *redisProc
		p, sharedErr = startRedis()
		if sharedErr == nil {
			sharedAddr = p.addr
		}
	})
	if sharedErr != nil {
		noServer(t, sharedErr)
	}
	return sharedAddr
}

func noServer(t testing.TB, err error) {
	t.Helper()
	if testenv.RequireBackends() {
		t.Fatalf("no Valkey/Redis server: %v", err)
	}
	t.Skipf("no Valkey/Redis server (set %s or put redis-server on PATH): %v", envAddr, err)
}

// privateServer starts a server only this test uses (for restarts, pauses
// and kills), whatever LEASE_TEST_VALKEY_ADDR says.
func privateServer(t testing.TB, args ...string) *redisProc {
	t.Helper()
	p, err := startRedis(args...)
	if err != nil {
		noServer(t, err)
	}
	t.Cleanup(p.stop)
	return p
}

// redisProc is a redis-server process on a loopback port.
type redisProc struct {
	bin  string
	dir  string
	port int
	addr string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

func startRedis(args ...string) (*redisProc, error) {
	bin, err := testserver.FindBinary([]string{"valkey-server", "redis-server"})
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lease-valkey-")
	if err != nil {
		return nil, err
	}
	port, err := testserver.FreePort()
	if err != nil {
		return nil, err
	}
	p := &redisProc{bin: bin, dir: dir, port: port, addr: testserver.Addr(port), args: args}
	if err := p.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	return p, nil
}

func (p *redisProc) start() error {
	base := []string{
		"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1", "--dir", p.dir,
		"--save", "", "--daemonize", "no", "--protected-mode", "no",
		"--logfile", "server.log",
	}
	cmd := exec.Command(p.bin, append(base, p.args...)...)
	cmd.Dir = p.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ping(p.addr) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // polling a starting process, not ordering goroutines
	}
	p.kill()
	return fmt.Errorf("server on port %d did not start", p.port)
}

// ping sends PING over a raw connection and waits for +PONG (a loading
// server answers -LOADING).
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("not ready")
	}
	return nil
}

// kill ends the process with SIGKILL and waits for it.
func (p *redisProc) kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

// restart kills the process and starts it again on the same port and
// directory.
func (p *redisProc) restart() error {
	p.kill()
	return p.start()
}

func (p *redisProc) stop() {
	p.kill()
	os.RemoveAll(p.dir)
}

// newClient returns a valkey-go client closed when t ends.
func newClient(t testing.TB, addrs ...string) vk.Client {
	t.Helper()
	c, err := vk.NewClient(vk.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey-go client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// uniquePrefix isolates one test's keys on a shared server.
func uniquePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "leasetest-" + hex.EncodeToString(b[:])
}

// newStore returns a Store with a fresh prefix, closed when t ends.
func newStore(t testing.TB, c vk.Client, o valkey.Options) *valkey.Store {
	t.Helper()
	if o.Prefix == "" {
		o.Prefix = uniquePrefix()
	}
	s, err := valkey.New(c, o)
	if err != nil {
		t.Fatalf("valkey.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}
