package apconn

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestHoldBoundsLastPublish checks the time hold returns for the last
// publish, which a fast cutover waits from: never before the publish
// (the wait would be too short and a message could be overtaken), and
// the observation's time, not now, once a tick has seen the publish.
// Publishes go through the Conn's own path, held (no target).
func TestHoldBoundsLastPublish(t *testing.T) {
	t1 := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	t2 := t1.Add(20 * time.Millisecond)
	type step struct {
		publish bool
		observe time.Time // zero: no observation
	}
	cases := []struct {
		name  string
		steps []step
		want  time.Time // zero with wantNow: a time read by hold itself
		now   bool
	}{
		{name: "nothing published", want: time.Time{}},
		{name: "nothing published, observed", steps: []step{{observe: t1}}, want: time.Time{}},
		{name: "published, not yet observed", steps: []step{{publish: true}}, now: true},
		{name: "published, observed", steps: []step{{publish: true}, {observe: t1}}, want: t1},
		{name: "observed again with no publish between", steps: []step{{publish: true}, {observe: t1}, {observe: t2}}, want: t1},
		{name: "published after the observation", steps: []step{{publish: true}, {observe: t1}, {publish: true}}, now: true},
		{name: "published after, then observed", steps: []step{{publish: true}, {observe: t1}, {publish: true}, {observe: t2}}, want: t2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Conn{}
			c.pub.ledger.max = 1 << 20
			for _, s := range tc.steps {
				if s.publish {
					if err := c.PublishOwned(&nats.Msg{Subject: "a", Data: []byte("x")}); err != nil {
						t.Fatal(err)
					}
				}
				if !s.observe.IsZero() {
					c.pub.observe(s.observe)
				}
			}
			before := time.Now()
			_, _, got := c.pub.hold()
			if tc.now {
				if got.Before(before) || got.After(time.Now()) {
					t.Fatalf("last publish at %v, want a time read by hold (after %v)", got, before)
				}
				return
			}
			if !got.Equal(tc.want) {
				t.Fatalf("last publish at %v, want %v", got, tc.want)
			}
		})
	}
}
