package lifecycle

import (
	"context"
	"errors"
	"testing"
)

var (
	errLoss  = errors.New("lost")
	errEnded = errors.New("ended")
)

func TestWatchLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		// event makes something happen to the lease, or nothing.
		event func(loss chan error, ended chan struct{})
		want  error // the loss stop returns and the cause of the work's ctx
	}{
		{"loss", func(loss chan error, _ chan struct{}) { loss <- errLoss }, errLoss},
		{"ended", func(_ chan error, ended chan struct{}) { close(ended) }, errEnded},
		{"loss channel closed", func(loss chan error, _ chan struct{}) { close(loss) }, nil},
		{"work returned first", func(chan error, chan struct{}) {}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(t.Context())
			defer cancel(nil)
			loss := make(chan error, 1)
			ended := make(chan struct{})
			stop := WatchLoss(loss, func(err error) error { return err }, ended, func() error { return errEnded }, cancel)
			tc.event(loss, ended)
			if tc.want != nil {
				<-ctx.Done() // the watcher cancels the work
			}
			if got := stop(); got != tc.want {
				t.Errorf("stop() = %v; want %v", got, tc.want)
			}
			if got := context.Cause(ctx); tc.want != nil && got != tc.want {
				t.Errorf("cause = %v; want %v", got, tc.want)
			}
			if tc.want == nil && ctx.Err() != nil {
				t.Errorf("work's ctx canceled (%v) without a loss", context.Cause(ctx))
			}
		})
	}
}
