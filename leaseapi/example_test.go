package leaseapi_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

func ExampleNewKey() {
	k, err := leaseapi.NewKey("jobs", "reports/daily")
	fmt.Println(k, err)
	back, _ := leaseapi.ParseKey(k.String())
	fmt.Println(back == k, back.Namespace(), back.Name())

	_, err = leaseapi.NewKey("jobs/x", "daily") // '/' belongs to the name only
	fmt.Println(errors.Is(err, leaseapi.ErrInvalidState))
	// Output:
	// jobs/reports/daily <nil>
	// true jobs reports/daily
	// true
}

func ExampleNewPolicy() {
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 30 * time.Second})
	fmt.Println(err)
	fmt.Println(p.SafetyMargin(), p.RenewEvery(), p.OperationTimeout(), p.MaxAttempts(), p.FailureBehavior())

	again, _ := leaseapi.NewPolicy(p.Options()) // every accepted policy round-trips
	fmt.Println(again == p)

	_, err = leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Second, SafetyMargin: time.Second - time.Nanosecond})
	fmt.Println(err)
	// Output:
	// <nil>
	// 3s 9s 10s 10000 fail-closed
	// true
	// lease: new policy: invalid state or input: safety margin leaves less than 1µs of the ttl
}

func ExampleRecord_SafeDeadline() {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rec := leaseapi.Record{AcquiredAt: t0, ExpiresAt: t0.Add(30 * time.Second)}
	// Backend-clock terms: ExpiresAt minus the margin.
	fmt.Println(rec.SafeDeadline(5 * time.Second).Format(time.TimeOnly))
	fmt.Println(rec.UsableAt(t0.Add(20*time.Second), 5*time.Second), rec.UsableAt(t0.Add(25*time.Second), 5*time.Second))

	// The deadline a handle enforces is on the local clock, from the send
	// time of the request that produced the record.
	p, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 30 * time.Second, SafetyMargin: 5 * time.Second})
	sentAt := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC) // an unrelated local clock
	fmt.Println(rec.LocalDeadline(sentAt, p).Format(time.TimeOnly))
	// Output:
	// 12:00:25
	// true false
	// 09:00:25
}

func ExampleWrap() {
	// Driver errors are classified and redacted: the text is dropped.
	err := leaseapi.Wrap(errors.New("dial tcp 10.0.0.7:6379: connection refused"), "renew")
	fmt.Println(err, errors.Is(err, leaseapi.ErrBackendUnavailable))
	err = leaseapi.Wrap(context.DeadlineExceeded, "acquire")
	fmt.Println(err, errors.Is(err, leaseapi.ErrTimeout), errors.Is(err, context.DeadlineExceeded))
	fmt.Println(leaseapi.OutcomeOf(err))
	// Output:
	// lease: renew: backend unavailable true
	// lease: acquire: timed out true true
	// timeout
}
