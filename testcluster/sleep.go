package testcluster

import (
	"context"
	"time"
)

// sleepCtx waits d or until ctx ends, whichever is first, and returns
// ctx's error in the second case. Scripts and restart retries wait with it
// so that cancelling a script or closing the pair ends the wait at once;
// time.Sleep would hold Close up for the rest of a step's hold.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
