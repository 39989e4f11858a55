package testserver

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Bounds on every wait in this package. A server that needs longer than
// startTimeout to answer, or longer than stopTimeout to exit after a polite
// signal, is treated as broken (and, on stop, killed).
const (
	startTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
	pollEvery    = 10 * time.Millisecond
)

// proc is one server process this package started. It is a direct child of
// the test binary, so stop and kill reap it (no zombie, no orphan); pause,
// resume and kill reach every process it forks (Redis's background savers,
// PostgreSQL's backends, which each lead a session of their own); it leads
// its own process group, so a ^C in the terminal reaches only the test
// binary, which then stops it; and it has a parent-death signal, so it dies
// with the test binary even when that binary panics or is killed.
//
// proc starts no goroutine: liveness is read from /proc and reaping happens
// in stop and kill. It is not safe for concurrent use; its owners serialise
// access with their own mutex.
type proc struct {
	cmd    *exec.Cmd
	log    string // file holding the process's stdout and stderr
	reaped bool   // Wait has returned: the pid may belong to someone else now
}

// startProc starts bin with args in dir, appending its output to logPath.
// cred, when non-nil, runs the process as another OS user; env nil inherits
// the test binary's environment.
func startProc(bin string, args []string, dir, logPath string, cred *syscall.Credential, env []string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testserver: open log: %w", err)
	}
	defer logf.Close() // the child holds its own copy of the descriptor

	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = logf // an *os.File: exec starts no copying goroutine
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: cred,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testserver: start %s: %w", filepath.Base(bin), err)
	}
	return &proc{cmd: cmd, log: logPath}, nil
}

// pid is the process id, which is also its process group id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has terminated (it is a zombie
// waiting to be reaped, or gone).
func (p *proc) exited() bool { return p.reaped || pidExited(p.pid()) }

// signalGroup sends sig to the process and every process in its group.
func (p *proc) signalGroup(sig syscall.Signal) error {
	if p.reaped {
		return nil
	}
	if err := syscall.Kill(-p.pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("testserver: signal %v: %w", sig, err)
	}
	return nil
}

// pause freezes the process, its group and its descendants (PostgreSQL puts
// each backend in a session of its own, out of the postmaster's group). The
// leader is frozen first, so it forks nothing the scan would miss.
func (p *proc) pause() error {
	if err := p.signalGroup(syscall.SIGSTOP); err != nil {
		return err
	}
	for _, pid := range p.descendants() {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	return nil
}

// resume continues what pause froze: the descendants first, then the
// leader, which may then fork again.
func (p *proc) resume() error {
	if p.reaped {
		return nil
	}
	for _, pid := range p.descendants() {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	return p.signalGroup(syscall.SIGCONT)
}

// stop asks the process to exit with sig, waits up to stopTimeout and then
// kills it with its descendants; it always reaps the process before
// returning. A paused process is continued so it can act on sig.
func (p *proc) stop(sig syscall.Signal) {
	if p.reaped {
		return
	}
	_ = syscall.Kill(p.pid(), sig)
	_ = p.resume()
	deadline := time.Now().Add(stopTimeout)
	for !p.exited() && time.Now().Before(deadline) {
		time.Sleep(pollEvery)
	}
	p.kill()
}

// kill crashes the process as a machine crash would: it is frozen, then it,
// its group and its descendants get SIGKILL; it is reaped, and kill waits
// (bounded) until the descendants have exited too, so that a restart finds
// no one still attached to the old shared memory. Idempotent.
func (p *proc) kill() {
	if p.reaped {
		return
	}
	_ = p.signalGroup(syscall.SIGSTOP)
	desc := p.descendants()
	for _, pid := range desc {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = p.signalGroup(syscall.SIGKILL)
	_ = p.cmd.Wait() // SIGKILL cannot be caught: Wait returns promptly
	p.reaped = true
	deadline := time.Now().Add(stopTimeout)
	for _, pid := range desc {
		for !pidExited(pid) && time.Now().Before(deadline) {
			time.Sleep(pollEvery)
		}
	}
}

// descendants returns the pids of the process's children, grandchildren and
// so on, read from /proc.
func (p *proc) descendants() []int {
	if p.reaped {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := []int{p.pid()}
	for len(queue) > 0 {
		next := children[queue[0]]
		queue = append(queue[1:], next...)
		out = append(out, next...)
	}
	return out
}

// procStat returns the fields of /proc/pid/stat after "pid (comm) ": state,
// ppid, ... (comm may hold spaces and parentheses).
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return nil, false
	}
	return f, true
}

// parentOf returns the parent pid of pid.
func parentOf(pid int) (int, bool) {
	f, ok := procStat(pid)
	if !ok {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// pidExited reports whether pid is a zombie or gone.
func pidExited(pid int) bool {
	f, ok := procStat(pid)
	return !ok || f[0] == "Z" || f[0] == "X"
}

// logTail returns the last lines of the process's output, for error messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	const max = 2048
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(bytes.TrimSpace(b))
}

// exitError describes a process that exited while it should have been
// starting up, with the end of its output.
func (p *proc) exitError(name string) error {
	p.kill() // reap it to read its status
	return fmt.Errorf("testserver: %s exited during startup (%v): %s", name, p.cmd.ProcessState, p.logTail())
}
