package bridge_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/simsource"
	"github.com/apbridge/apbridge/wire"
)

// BenchmarkUpdate is the bridge's part of an update: the tag's lookup by
// handle, sequencing, encoding and the core sink's publish on a real
// broker, 10,000 tags in turn.
//
//	go test -run '^$' -bench '^BenchmarkUpdate$' -benchmem ./bridge/
func BenchmarkUpdate(b *testing.B) {
	_, conn := testutil.ClusterConn(b)
	const n = 10000
	tags := make([]bridge.TagConfig, n)
	for i := range tags {
		tags[i] = bridge.TagConfig{Name: "T" + strconv.Itoa(i), Address: "ns=1;s=T" + strconv.Itoa(i)}
	}
	src := simsource.New("sim1")
	br, err := bridge.New(conn, bridge.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if err := br.AddSource(src, tags); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := br.Start(ctx); err != nil {
		b.Fatal(err)
	}
	testutil.WaitFor(b, "tags subscribed", 10*time.Second, func() bool { return src.Subscribed() == n })
	var handles []uint32
	for _, t := range src.SubscribedTags() {
		handles = append(handles, t.Handle)
	}
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		src.Emit(handles[i%n], wire.Update{Value: int64(i), Status: wire.StatusGood, SourceTime: now, ServerTime: now})
	}
	b.StopTimer()
	if err := conn.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAddSource is what a relay allocates to take 10,000 tags: their
// state, the indexes, and the checks of every subject (the service
// subjects, the reserved spaces, the other tags). What it allocates on
// the way is garbage that grows the heap before the first update.
//
//	go test -run '^$' -bench '^BenchmarkAddSource$' -benchmem ./bridge/
func BenchmarkAddSource(b *testing.B) {
	_, conn := testutil.ClusterConn(b)
	const n = 10000
	tags := make([]bridge.TagConfig, n)
	for i := range tags {
		tags[i] = bridge.TagConfig{Name: "Line1.T" + strconv.Itoa(i), Address: "ns=1;s=T" + strconv.Itoa(i)}
	}
	b.ReportAllocs()
	for b.Loop() {
		br, err := bridge.New(conn, bridge.Config{})
		if err != nil {
			b.Fatal(err)
		}
		if err := br.AddSource(simsource.New("sim1"), tags); err != nil {
			b.Fatal(err)
		}
		br.Close()
	}
}
