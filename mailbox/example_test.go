package mailbox_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasekit/lease/mailbox"
)

// An actor that doubles numbers: one goroutine receives, callers use
// Request, and after Close every request fails with ErrClosed.
func Example() {
	inbox := mailbox.New[mailbox.Call[int, int]](4)
	done := make(chan struct{})
	go func() { // the actor
		defer close(done)
		for {
			select {
			case c := <-inbox.Receive():
				if c.Take() {
					c.Reply(2 * c.Req)
				}
			case <-inbox.Closed():
				inbox.Drain(func(mailbox.Call[int, int]) {}) // answer nothing queued: Wait sees done
				return
			}
		}
	}()

	ctx := context.Background()
	r, err := mailbox.Request(ctx, inbox, done, 21)
	fmt.Println(r, err)

	inbox.Close()
	<-done
	_, err = mailbox.Request(ctx, inbox, done, 1)
	fmt.Println(errors.Is(err, mailbox.ErrClosed))
	// Output:
	// 42 <nil>
	// true
}
