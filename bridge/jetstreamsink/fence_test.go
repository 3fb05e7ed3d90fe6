package jetstreamsink_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge/jetstreamsink"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

const fenceHeader = "Test-Fence-Token"

// fencedPublisher is one owner of a source: a sink whose updates carry
// its fencing token.
type fencedPublisher struct {
	sink    *jetstreamsink.Sink
	subject string
	token   uint64
}

func newFencedPublisher(t *testing.T, cl *natstest.Cluster, stream string, replicas int, token uint64, fence bool) *fencedPublisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := apconn.Connect(ctx, cl.URLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	var opts []jetstreamsink.Option
	if fence {
		opts = append(opts, jetstreamsink.WithFence(fenceHeader))
	}
	sink, err := jetstreamsink.New(ctx, conn, jetstreamsink.Config{Stream: stream, Subjects: []string{"fence." + stream + ".>"}, Replicas: replicas}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	return &fencedPublisher{sink: sink, subject: "fence." + stream + ".Counter", token: token}
}

// publish stores counter value v of the tag, stamped v ms after base, and
// waits until the stream has answered.
func (p *fencedPublisher) publish(t *testing.T, base time.Time, v int64) {
	t.Helper()
	if err := p.send(base, v); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.sink.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// send hands the sink counter value v, stamped v ms after base.
func (p *fencedPublisher) send(base time.Time, v int64) error {
	return p.sendTag(base, "Counter", v)
}

// sendTag hands the sink value v of tag, stamped v ms after base.
func (p *fencedPublisher) sendTag(base time.Time, tag string, v int64) error {
	u := &wire.Update{Tag: tag, Value: v, SourceTime: base.Add(time.Duration(v) * time.Millisecond)}
	m := &nats.Msg{Subject: strings.TrimSuffix(p.subject, "Counter") + tag, Data: []byte(strconv.FormatInt(v, 10)),
		Header: nats.Header{fenceHeader: []string{strconv.FormatUint(p.token, 10)}}}
	return p.sink.Publish("line1", m, u)
}

func (p *fencedPublisher) wantFenced(t *testing.T, want uint64) {
	t.Helper()
	if n := p.sink.Stats().Fenced; n != want {
		t.Errorf("owner with token %d: %d updates fenced, want %d", p.token, n, want)
	}
}

func storedValues(t *testing.T, cl *natstest.Cluster, stream string) []int64 {
	t.Helper()
	var out []int64
	for _, m := range readStored(t, cl, stream) {
		v, _ := strconv.ParseInt(string(m.Data), 10, 64)
		out = append(out, v)
	}
	return out
}

// Two owners of a source store the same tag while it changes hands: the
// old one (token 1) lags, the new one (token 2) starts at a newer value.
// The old owner's late values are kept out once the new owner has stored
// the tag, so the tag never goes back in the stream; the new owner's
// updates are stored after whatever the old owner stored before it.
func TestFenceKeepsATagInOrderAcrossOwners(t *testing.T) {
	cl := startJSCluster(t)
	base := time.Now()
	// A replicated stream refuses a wrong expectation without naming the
	// subject's sequence, a stream of one replica names it.
	for _, c := range []struct {
		fence    bool
		replicas int
	}{{false, 3}, {true, 1}, {true, 3}} {
		fence := c.fence
		t.Run(fmt.Sprintf("fence=%v,R%d", c.fence, c.replicas), func(t *testing.T) {
			stream := fmt.Sprintf("FENCE%vR%d", c.fence, c.replicas)
			old := newFencedPublisher(t, cl, stream, c.replicas, 1, fence)
			next := newFencedPublisher(t, cl, stream, c.replicas, 2, fence)
			old.publish(t, base, 1)
			next.publish(t, base, 3) // its first: stored after the old owner's
			old.publish(t, base, 2)  // late: the new owner has stored the tag
			// Newer, but from the old owner: kept out too, or the new
			// owner's lagging 4 would go in after it.
			old.publish(t, base, 5)
			next.publish(t, base, 4)
			next.publish(t, base, 6)
			got := storedValues(t, cl, stream)
			if !fence {
				// The control: without the fence the late value goes in
				// after a newer one.
				if want := []int64{1, 3, 2, 5, 4, 6}; !slices.Equal(got, want) {
					t.Fatalf("stored %v, want %v", got, want)
				}
				return
			}
			if want := []int64{1, 3, 4, 6}; !slices.Equal(got, want) {
				t.Fatalf("stored %v, want %v", got, want)
			}
			old.wantFenced(t, 2)
			next.wantFenced(t, 0)
		})
	}
}

// The newer owner is never fenced by the old one: an update the old owner
// stored between two of the new owner's (before it learnt of the new
// owner) makes the new owner's next update go in after it.
func TestFenceNewerOwnerGoesOnAfterTheOldOnesWrite(t *testing.T) {
	cl := startJSCluster(t)
	base := time.Now()
	const stream = "FENCENEWER"
	next := newFencedPublisher(t, cl, stream, 3, 2, true)
	old := newFencedPublisher(t, cl, stream, 3, 1, true)
	next.publish(t, base, 1)
	old.publish(t, base, 2) // the old owner's first: nothing to expect
	next.publish(t, base, 3)
	old.publish(t, base, 4)
	if got, want := storedValues(t, cl, stream), []int64{1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	next.wantFenced(t, 0)
	old.wantFenced(t, 1)
}

// Both owners publish the tag flat out at once, so that the replicated
// stream also refuses updates while another one of the tag is in flight
// (without naming a sequence). The old owner has stored the tag before
// and lags (its values are all older than the new owner's first). Every
// update settles, and once the new owner has stored the tag no update of
// the old one follows: the tag never goes back.
func TestFenceUnderConcurrentOwners(t *testing.T) {
	cl := startJSCluster(t)
	base := time.Now()
	const stream = "FENCERACE"
	old := newFencedPublisher(t, cl, stream, 3, 1, true)
	next := newFencedPublisher(t, cl, stream, 3, 2, true)
	old.publish(t, base, 0)
	var wg sync.WaitGroup
	sendAll := func(p *fencedPublisher, from, to int64) {
		defer wg.Done()
		for v := from; v <= to; v++ {
			if err := p.send(base, v); err != nil {
				t.Error(err)
				return
			}
		}
	}
	wg.Add(2)
	go sendAll(old, 1, 99)
	go sendAll(next, 100, 299)
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, p := range []*fencedPublisher{old, next} {
		if err := p.sink.Flush(ctx); err != nil {
			t.Fatalf("token %d: %v (stats %+v)", p.token, err, p.sink.Stats())
		}
	}
	got := storedValues(t, cl, stream)
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			t.Fatalf("stored %v: %d after %d", got, got[i], got[i-1])
		}
	}
	if got[len(got)-1] != 299 {
		t.Errorf("stored %v: the new owner's last update is missing", got)
	}
	t.Logf("%d stored; old owner fenced %d, new owner %+v", len(got), old.sink.Stats().Fenced, next.sink.Stats())
}

// A handover at plant scale: the old owner's next update of every one of
// 2,000 tags is refused at once. Each refusal reads the tag's newest
// message; all are fenced, none is stored after the new owner's, and the
// old owner's window drains (its reads run side by side, not one after
// another, or a relay's other sources would wait behind them).
func TestFenceAtPlantScale(t *testing.T) {
	const tags = 2000
	cl := startJSCluster(t)
	base := time.Now()
	const stream = "FENCESCALE"
	old := newFencedPublisher(t, cl, stream, 3, 1, true)
	next := newFencedPublisher(t, cl, stream, 3, 2, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	round := func(p *fencedPublisher, v int64) time.Duration {
		start := time.Now()
		for i := range tags {
			if err := p.sendTag(base, fmt.Sprintf("T%04d", i), v); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.sink.Flush(ctx); err != nil {
			t.Fatalf("token %d: %v (%+v)", p.token, err, p.sink.Stats())
		}
		return time.Since(start)
	}
	round(old, 1)
	round(next, 3)
	took := round(old, 2) // every one refused, read and fenced
	old.wantFenced(t, tags)
	next.wantFenced(t, 0)
	got := storedValues(t, cl, stream)
	if len(got) != 2*tags || slices.Contains(got, 2) {
		t.Fatalf("%d stored (want %d), the old owner's late 2 among them: %v", len(got), 2*tags, slices.Contains(got, 2))
	}
	t.Logf("the old owner's %d refused updates settled in %v", tags, took.Round(time.Millisecond))
}
