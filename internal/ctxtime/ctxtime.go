// Package ctxtime waits on a clock and a context at once: the one sleep
// the module's packages use, so that closing an owner ends its waits.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends, whichever is first, and returns ctx's
// error in the second case. With d <= 0 it only reports ctx's state.
// time.Sleep would hold a Close up for the rest of the wait.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
