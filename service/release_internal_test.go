package service

import (
	"errors"
	"testing"

	"github.com/leasekit/lease/leaseapi"
)

// TestReleasePart: the release's failure is found in what Run returns,
// alone or joined with fn's error or a loss, and fn's own error is never
// taken for it.
func TestReleasePart(t *testing.T) {
	rel := leaseapi.NewError("release", leaseapi.ErrBackendUnavailable, "")
	amb := leaseapi.NewError("release", leaseapi.ErrAmbiguousOutcome, "")
	lost := leaseapi.NewError("run", leaseapi.ErrLost, "lease ended while running")
	fnErr := errors.New("job failed") // classified as ErrBackendUnavailable, but fn's
	canceled := leaseapi.NewError("job", leaseapi.ErrCanceled, "")
	for _, tc := range []struct {
		name       string
		err, fnErr error
		want       error // nil: no release failure
	}{
		{"nil", nil, nil, nil},
		{"released, fn failed", fnErr, fnErr, nil},
		{"release failed", rel, nil, rel},
		{"release ambiguous", amb, nil, amb},
		{"fn failed and release failed", errors.Join(fnErr, rel), fnErr, rel},
		{"fn canceled and release ambiguous", errors.Join(canceled, amb), canceled, amb},
		{"lost and release failed", errors.Join(lost, rel), nil, rel},
		{"lost only", lost, nil, nil},
		{"canceled only", canceled, canceled, nil},
	} {
		got := releasePart(tc.err, tc.fnErr)
		switch {
		case tc.want == nil && got != nil:
			t.Errorf("%s: got %v, want no release failure", tc.name, got)
		case tc.want != nil && (got == nil || !errors.Is(got, tc.want) || leaseapi.Kind(got) != leaseapi.Kind(tc.want)):
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		case got != nil && errors.Is(got, fnErr):
			t.Errorf("%s: got %v, which holds fn's own error", tc.name, got)
		}
	}
}
