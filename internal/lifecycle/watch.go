package lifecycle

import "context"

// WatchLoss watches a lease while protected work runs under it, and
// cancels the work's context as soon as the lease is lost. It starts one
// goroutine that waits for the first of:
//
//   - a value v on loss: the loss is lossErr(v);
//   - loss closed without a value: no loss (renewal stopped cleanly);
//   - ended closed (the lease is over, e.g. released or expired): the
//     loss is endedErr();
//   - the returned stop being called: no loss.
//
// On a loss it calls cancel with it as the cause, then exits. stop ends the
// watch, waits until the goroutine has exited and returns the loss, nil if
// there was none; call it exactly once, after the work returned.
func WatchLoss[L any](loss <-chan L, lossErr func(L) error, ended <-chan struct{}, endedErr func() error, cancel context.CancelCauseFunc) (stop func() (lost error)) {
	quit := make(chan struct{})    // closed by stop
	watched := make(chan struct{}) // closed by the watcher as it exits
	var lost error                 // written by the watcher before it closes watched
	go func() {
		defer close(watched)
		select {
		case v, ok := <-loss:
			if ok {
				lost = lossErr(v)
			}
		case <-ended:
			lost = endedErr()
		case <-quit:
		}
		if lost != nil {
			cancel(lost)
		}
	}()
	return func() error {
		close(quit)
		<-watched
		return lost
	}
}
