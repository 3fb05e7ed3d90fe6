package ctxtime

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("full sleep: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled sleep: %v", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("a cancelled sleep waited %v", d)
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("zero sleep on a done context: %v", err)
	}
	if err := Sleep(context.Background(), -time.Second); err != nil {
		t.Fatalf("negative sleep: %v", err)
	}
}
