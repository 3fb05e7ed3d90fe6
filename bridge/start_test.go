package bridge_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/sourcetest"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/simsource"
)

// stuckSource's Start waits until its context ends: a source that breaks
// the contract and waits for servers that are down.
type stuckSource struct {
	*simsource.Source
	entered chan struct{}
}

func (s *stuckSource) Start(ctx context.Context, h bridge.Handler) error {
	close(s.entered)
	<-ctx.Done()
	return ctx.Err()
}

// failingSource's Start fails.
type failingSource struct{ *simsource.Source }

func (failingSource) Start(context.Context, bridge.Handler) error {
	return errors.New("no such server")
}

// A source whose Start never returns, and one whose Start fails, hold up
// neither Bridge.Start nor the other sources nor Close; the bridge says
// what it waits for.
func TestSourcesStartSideBySide(t *testing.T) {
	conn := singleNodeConn(t)
	b, err := bridge.New(conn, bridge.Config{Prefix: "sbs"}, bridge.WithLogger(testutil.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	stuck := &stuckSource{simsource.New("stuck"), make(chan struct{})}
	live := simsource.New("live")
	for _, src := range []bridge.Source{stuck, failingSource{simsource.New("failing")}, live} {
		if err := b.AddSource(src, tagsN(2, false)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), sourcetest.Patience)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-stuck.entered // the control: the stuck source's Start runs
	testutil.WaitFor(t, "the live source's tags subscribed", 10*time.Second, func() bool { return live.Subscribed() == 2 })
	live.EmitAll()
	testutil.WaitFor(t, "the live source's updates published", 10*time.Second, func() bool {
		return statsOf(b, "live").Published == 2
	})
	testutil.WaitFor(t, "the failing source reported down", 10*time.Second, func() bool {
		return statsOf(b, "failing").Health.State == bridge.StateDown
	})
	ok, why := b.Ready()
	want := []string{"source failing: down (start failed: no such server)", "source stuck: connecting"}
	if ok || strings.Join(why, "|") != strings.Join(want, "|") {
		t.Errorf("ready %v %q, want not ready %q", ok, why, want)
	}
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case <-done:
	case <-time.After(sourcetest.Patience):
		t.Fatal("Close did not return while a source was still starting")
	}
}

func statsOf(b *bridge.Bridge, source string) bridge.SourceStats {
	for _, s := range b.Stats() {
		if s.Name == source {
			return s
		}
	}
	return bridge.SourceStats{}
}

// WaitReady returns when every source is connected; until then its error
// names those it waits for.
func TestWaitReady(t *testing.T) {
	conn := singleNodeConn(t)
	b, err := bridge.New(conn, bridge.Config{Prefix: "wr"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	up, down := simsource.New("up"), simsource.New("down")
	down.Down()
	for _, src := range []bridge.Source{up, down} {
		if err := b.AddSource(src, tagsN(1, false)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the down source's state", 10*time.Second, func() bool {
		return statsOf(b, "down").Health.State == bridge.StateDown && statsOf(b, "up").Health.State == bridge.StateConnected
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err = b.WaitReady(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "source down: down (sim: server unreachable)") ||
		strings.Contains(err.Error(), "source up") {
		t.Fatalf("WaitReady with a source down: %v", err)
	}
	down.Up()
	ctx, cancel = context.WithTimeout(context.Background(), sourcetest.Patience)
	defer cancel()
	if err := b.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// Tags added to a running source are checked like the first ones and
// subscribed through its guard; a refused batch adds none of its tags.
func TestAddTagsWhileRunning(t *testing.T) {
	e := setup(t, bridge.Config{Prefix: "at"}, tagsN(1, false))
	testutil.WaitFor(t, "the first tag subscribed", 10*time.Second, func() bool { return e.src.Subscribed() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	more := []bridge.TagConfig{{Name: "Line2.X", Address: "ns=1;s=X"}, {Name: "Line2.Y", Address: "ns=1;s=Y"}}
	if err := e.b.AddTags(ctx, "sim1", more); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the added tags subscribed", 10*time.Second, func() bool { return e.src.Subscribed() == 3 })
	if subj, ok := e.b.Subject("sim1", "Line2.Y"); !ok || subj != "apbridge.sim1.Line2.Y" {
		t.Errorf("the added tag's subject: %q %v", subj, ok)
	}
	for _, c := range []struct {
		tags []bridge.TagConfig
		want string
	}{
		{[]bridge.TagConfig{{Name: "Line3.Z", Address: "z"}, {Name: "Line2.X", Address: "x"}}, `tag "Line2.X" is listed twice`},
		{[]bridge.TagConfig{{Name: "Line3.Z", Address: "z"}, {Name: "Other", Address: "o", Subject: "apbridge.sim1.Line2.X"}}, `like tag "Line2.X"`},
		{[]bridge.TagConfig{{Name: "Line3.Z", Address: "z"}, {Name: "Line3/Z", Address: "z2"}}, `like tag "Line3.Z"`},
		{[]bridge.TagConfig{{Name: "Line3.Z", Address: "z"}, {Name: "Sys", Address: "s", Subject: "$SYS.REQ.SERVER.PING"}}, `reserved subject space "$SYS.>"`},
	} {
		err := e.b.AddTags(ctx, "sim1", c.tags)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("AddTags %v: %v, want %q", c.tags, err, c.want)
		}
		if _, ok := e.b.Subject("sim1", "Line3.Z"); ok {
			t.Errorf("AddTags %v refused, and still added Line3.Z", c.tags)
		}
	}
	if err := e.b.AddTags(ctx, "nosuch", more); err == nil || !strings.Contains(err.Error(), `no source "nosuch"`) {
		t.Errorf("AddTags to an unknown source: %v", err)
	}
	if n := statsOf(e.b, "sim1").Tags; n != 3 {
		t.Errorf("%d tags after the refusals, want 3", n)
	}
}

// losingSource loses its subscriptions once, right as it answers a
// subscribe: it takes the tags, then reports Restored (its connection
// went, and the tags with it) before the answer reaches the bridge.
type losingSource struct {
	*simsource.Source
	lose chan struct{} // a value: the next subscribe loses its tags
}

func (s *losingSource) Subscribe(ctx context.Context, tags []bridge.Tag) ([]error, error) {
	errs, err := s.Source.Subscribe(ctx, tags)
	select {
	case <-s.lose:
		s.Source.Restore() // drops the tags, then tells the bridge
	default:
	}
	return errs, err
}

// A reply that reaches the bridge after the source reported its
// subscriptions lost does not count: the bridge subscribes every tag
// again. (Before, the late reply marked the tags subscribed again, and
// the next request went without them: the source relayed nothing.)
func TestRestoredOutranksALateReply(t *testing.T) {
	conn := singleNodeConn(t)
	b, err := bridge.New(conn, bridge.Config{Prefix: "lost"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	src := &losingSource{Source: simsource.New("losing"), lose: make(chan struct{}, 1)}
	if err := b.AddSource(src, tagsN(3, false)); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the tags subscribed", 10*time.Second, func() bool { return src.Subscribed() == 3 })
	for round := range 30 {
		requests, _ := src.Requests()
		src.lose <- struct{}{}
		src.Restore() // the next subscribe answers, and loses them again
		testutil.WaitFor(t, "the lost tags subscribed again", 10*time.Second, func() bool {
			n, _ := src.Requests()
			return n >= requests+2 && src.Subscribed() == 3 && !statsOf(b, "losing").SubscribeInFlight
		})
		if n := src.Subscribed(); n != 3 {
			t.Fatalf("round %d: %d of 3 tags subscribed at the source", round, n)
		}
	}
}

// WaitReady returns when the bridge is closed, not when its context ends.
func TestWaitReadyEndsAtClose(t *testing.T) {
	conn := singleNodeConn(t)
	b, err := bridge.New(conn, bridge.Config{Prefix: "wrc"})
	if err != nil {
		t.Fatal(err)
	}
	down := simsource.New("down")
	down.Down()
	if err := b.AddSource(down, tagsN(1, false)); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.WaitReady(context.Background()) }()
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, bridge.ErrClosed) {
			t.Fatalf("WaitReady after Close: %v, want ErrClosed", err)
		}
	case <-time.After(sourcetest.Patience):
		t.Fatal("WaitReady still waiting after Close")
	}
}

// A source another relay of its fleet owns runs no session here by design:
// it counts as ready. The control: down does not.
func TestNotOwnedCountsAsReady(t *testing.T) {
	conn := singleNodeConn(t)
	b, err := bridge.New(conn, bridge.Config{Prefix: "nor"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	src := simsource.New("leased")
	if err := b.AddSource(src, tagsN(1, false)); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		state bridge.State
		ready bool
	}{{bridge.StateDown, false}, {bridge.StateNotOwned, true}} {
		src.SetHealth(bridge.Health{State: c.state, Level: -1})
		testutil.WaitFor(t, "the state taken", 10*time.Second, func() bool { return statsOf(b, "leased").Health.State == c.state })
		if ok, why := b.Ready(); ok != c.ready {
			t.Errorf("%s: ready %v %q, want %v", c.state, ok, why, c.ready)
		}
	}
}
