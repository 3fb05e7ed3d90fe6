package bridge

import (
	"context"
	"fmt"
	"strings"
)

// Ready reports whether every source is connected to a server (Connected,
// or Degraded: connected to a server that is not Healthy, or without a
// standby) or owned by another relay of its fleet (NotOwned), and if not,
// what each of the others is doing, one line per source. A bridge with
// sources still connecting relays those that are connected: readiness is
// reported, never awaited by Start.
func (b *Bridge) Ready() (bool, []string) {
	var waiting []string
	for _, s := range b.Stats() {
		if st := s.Health.State; !st.Connected() && st != StateNotOwned {
			waiting = append(waiting, fmt.Sprintf("source %s: %s", s.Name, s.Health))
		}
	}
	return len(waiting) == 0, waiting
}

// WaitReady waits until Ready reports true, the bridge is closed
// (ErrClosed), or ctx ends; then the error names every source still not
// connected and what it is doing.
func (b *Bridge) WaitReady(ctx context.Context) error {
	for {
		changed := b.healthChanges()
		ok, waiting := b.Ready()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-b.done:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("bridge: sources not connected: %s: %w", strings.Join(waiting, "; "), ctx.Err())
		}
	}
}

// Connected reports whether a source in state s carries data from a
// server: StateConnected or StateDegraded.
func (s State) Connected() bool { return s == StateConnected || s == StateDegraded }

// String is the state, and the detail if there is one:
// "down (last error: ...)".
func (h Health) String() string {
	if h.Detail == "" {
		return string(h.State)
	}
	return fmt.Sprintf("%s (%s)", h.State, h.Detail)
}

// healthChanges returns a channel closed at the next health change of any
// source.
func (b *Bridge) healthChanges() <-chan struct{} {
	b.healthMu.Lock()
	defer b.healthMu.Unlock()
	return b.healthCh
}

// noteHealthChange wakes every WaitReady.
func (b *Bridge) noteHealthChange() {
	b.healthMu.Lock()
	defer b.healthMu.Unlock()
	close(b.healthCh)
	b.healthCh = make(chan struct{})
}
