package jetstreamsink_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/jetstreamsink"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"github.com/nats-io/jsm.go"
)

// A stream whose subjects are worked out from the tags captures the tags
// a source gets later (a browse that finds them once its servers answer):
// the subject template's pattern for that source is one of the stream's
// subjects, so tags added while the relay runs are stored. A tag added
// later on a subject of its own outside the stream is refused, naming it;
// so is a later tag of a source that did not say its tags come later (the
// control: without the pattern, the stream would not capture them).
func TestStreamCapturesTagsAddedLater(t *testing.T) {
	cl := startJSCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := apconn.Connect(ctx, cl.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sink, err := jetstreamsink.New(ctx, conn, jetstreamsink.Config{Stream: "LATER", Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	b, err := bridge.New(conn, bridge.Config{}, bridge.WithSink(sink))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	browsed, plain := simsource.New("browsed"), simsource.New("plain")
	if err := b.AddSource(browsed, nil, bridge.WithTagsLater()); err != nil {
		t.Fatal(err)
	}
	if err := b.AddSource(plain, jsTags(1)); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	mgr, err := jsm.New(conn.Active())
	if err != nil {
		t.Fatal(err)
	}
	st, err := mgr.LoadStream("LATER")
	if err != nil {
		t.Fatal(err)
	}
	if subj := st.Configuration().Subjects; !slices.Contains(subj, "apbridge.browsed.>") {
		t.Fatalf("stream subjects %v lack the later tags' pattern apbridge.browsed.>", subj)
	}

	found := []bridge.TagConfig{{Name: "Line9.X", Address: "ns=1;s=X"}, {Name: "Line9.Y", Address: "ns=1;s=Y"}}
	if err := b.AddTags(ctx, "browsed", found); err != nil {
		t.Fatalf("later tags under the stream's pattern: %v", err)
	}
	testutil.WaitFor(t, "the later tags subscribed", 10*time.Second, func() bool { return browsed.Subscribed() == 2 })
	browsed.EmitAll()
	testutil.WaitFor(t, "the later tags stored", 10*time.Second, func() bool {
		msgs, err := natstest.ReadStream(ctx, conn.Active(), "LATER")
		n := 0
		for _, m := range msgs {
			if strings.HasPrefix(m.Subject, "apbridge.browsed.Line9.") {
				n++
			}
		}
		return err == nil && n == 2
	})

	for _, c := range []struct {
		source string
		tag    bridge.TagConfig
	}{
		{"browsed", bridge.TagConfig{Name: "Own", Address: "ns=1;s=O", Subject: "elsewhere.own"}},
		{"plain", bridge.TagConfig{Name: "Line2.Z", Address: "ns=1;s=Z"}},
	} {
		err := b.AddTags(ctx, c.source, []bridge.TagConfig{c.tag})
		if err == nil || !strings.Contains(err.Error(), "is not captured by stream") {
			t.Errorf("source %s, tag %s: %v, want it refused as not captured", c.source, c.tag.Name, err)
		}
		if _, ok := b.Subject(c.source, c.tag.Name); ok {
			t.Errorf("source %s: the refused tag %s was added", c.source, c.tag.Name)
		}
	}
}
