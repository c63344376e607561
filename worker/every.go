package worker

import (
	"context"
	"time"
)

// every calls fn every period until ctx is done; the first call is one
// period in (a loop that needs one at once makes it before).
func every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}
