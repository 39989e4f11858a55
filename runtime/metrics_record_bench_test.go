package runtime

import (
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/supervisor"
)

// BenchmarkRecordPair is what the metrics record for one TryAcquire +
// Release pair, alone: the acquisition, its backend call, the release's
// call and the transition (what BenchmarkPairMetricsOn adds to
// BenchmarkPairMetricsOff, without the noise of the pair itself).
func BenchmarkRecordPair(b *testing.B) {
	c := &Client{m: new(clientMetrics)}
	k := leaseapi.MustKey("bench", "record")
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		var a acquisition
		a.called(c.m, time.Microsecond, nil)
		c.m.acquired(&a, time.Microsecond, nil)
		c.supervisorCall(supervisor.Call{Kind: supervisor.CallRelease, SentAt: now, Done: now.Add(time.Microsecond)})
		c.stateChanged(supervisor.StateChange{Key: k, Token: 1, At: now, From: leaseapi.StateActive, To: leaseapi.StateReleased})
	}
}
