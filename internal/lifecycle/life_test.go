package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"
)

// closed reports whether done is closed (a nil channel never is).
func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// wantRefused checks that l, running or stopped, is not idle and refuses
// Start and Serve without calling their functions.
func wantRefused(t *testing.T, l *Life, when string) {
	t.Helper()
	if l.Idle() {
		t.Errorf("Idle %s", when)
	}
	if l.Start(func() { t.Errorf("Start %s ran its function", when) }) {
		t.Errorf("Start %s = true", when)
	}
	if l.Serve(func() { t.Errorf("Serve %s ran its function", when) }) {
		t.Errorf("Serve %s = true", when)
	}
}

func TestStartRunsEveryFunctionOnce(t *testing.T) {
	var l Life
	if !l.Idle() {
		t.Fatal("zero Life not idle")
	}
	release := make(chan struct{})
	ran := make(chan int, 3)
	fns := make([]func(), 3)
	for i := range fns {
		fns[i] = func() { ran <- i; <-release }
	}
	if !l.Start(fns...) {
		t.Fatal("Start on an idle Life = false")
	}
	wantRefused(t, &l, "while started")
	seen := map[int]bool{}
	for range fns {
		seen[<-ran] = true
	}
	if len(seen) != 3 {
		t.Errorf("functions run: %v; want 0, 1 and 2", seen)
	}
	done := l.Stop()
	if done == nil || closed(done) {
		t.Fatal("Stop while functions run: done nil or closed")
	}
	close(release)
	<-done // every function returned
	wantRefused(t, &l, "after Stop")
	if again := l.Stop(); again != done {
		t.Error("second Stop returned another channel")
	}
}

func TestStartWithoutFunctions(t *testing.T) {
	var l Life
	if !l.Start() {
		t.Fatal("Start() = false")
	}
	<-l.Stop() // closes although nothing ran
}

func TestStopBeforeStart(t *testing.T) {
	var l Life
	if done := l.Stop(); done != nil {
		t.Fatalf("Stop before Start = %v; want nil (nothing runs)", done)
	}
	wantRefused(t, &l, "after Stop")
}

func TestServeRunsOnTheCallerAndMayRunAgain(t *testing.T) {
	var l Life
	for i := range 2 {
		ran := false
		if !l.Serve(func() {
			ran = true // the caller's goroutine: no race
			wantRefused(t, &l, "while serving")
		}) {
			t.Fatalf("Serve #%d = false", i)
		}
		if !ran || !l.Idle() {
			t.Fatalf("after Serve #%d: ran %v, idle %v; want both", i, ran, l.Idle())
		}
	}
	if l.Stop() != nil {
		t.Error("Stop between Serves returned a channel; want nil")
	}
}

func TestStopDuringServe(t *testing.T) {
	var l Life
	inside := make(chan struct{})
	release := make(chan struct{})
	served := make(chan bool)
	go func() {
		served <- l.Serve(func() { close(inside); <-release })
	}()
	<-inside
	done := l.Stop()
	if done == nil || closed(done) {
		t.Fatal("Stop during Serve: done nil or closed")
	}
	close(release)
	if !<-served {
		t.Error("Serve = false")
	}
	<-done
	wantRefused(t, &l, "after Stop during Serve")
}

func TestWait(t *testing.T) {
	if err := Wait(t.Context(), nil); err != nil {
		t.Errorf("Wait(nil) = %v; want nil", err)
	}
	done := make(chan struct{})
	close(done)
	if err := Wait(t.Context(), done); err != nil {
		t.Errorf("Wait(closed) = %v; want nil", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	if err := Wait(ctx, make(chan struct{})); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait(open, ctx ends) = %v; want context.DeadlineExceeded", err)
	}
}
