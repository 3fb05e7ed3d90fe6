package uaclient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/gopcua/opcua/ua"
)

// At plant scale a promotion must not create the data items after the
// decision: a Prepared standby holds them already, Disabled, and the
// switch only turns them to Reporting, batch by batch, and takes the
// first sample each item reports then rather than reading it. The
// snapshot still carries every item, once, in handle order, and no
// Bad_OutOfService sample of the departing server reaches consumers.
// Warm mode is the control: its promotion creates every item on the new
// server, and the server's count shows it.
func TestPromotionAtPlantScale(t *testing.T) {
	for _, tc := range []struct {
		mode    uaclient.Mode
		tags    int
		creates bool
	}{
		{uaclient.ModePrepared, 10000, false},
		{uaclient.ModeWarm, 600, true},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			testPromotionAtScale(t, tc.mode, tc.tags, tc.creates)
		})
	}
}

func testPromotionAtScale(t *testing.T, mode uaclient.Mode, tags int, wantCreates bool) {
	r := newRig(t, rigOption{
		levels:  [2]byte{250, 240},
		noStart: true,
		// Ticks once a second: 2,500 counters at 10 Hz would keep the
		// in-process servers busy under the race detector.
		servers: []uaserver.Option{uaserver.WithTags(tags), uaserver.WithTagInterval(time.Second)},
		cfg: func(c *uaclient.PairConfig) {
			c.Mode = mode
			// Under the race detector the in-process servers serve
			// 10,000 items slowly: a busy server is not a dead link.
			c.HeartbeatTimeoutMilliseconds = new(5000)
			c.ReadTimeoutMilliseconds = new(5000)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var more []uaclient.Item
	for i, tag := range r.servers.Tags()[testTags:] {
		more = append(more, uaclient.Item{Handle: uint32(testTags + i), NodeID: tag.NodeID().String()})
	}
	if _, err := r.pair.AddItems(ctx, more); err != nil {
		t.Fatal(err)
	}
	tags = len(r.servers.Tags()) // the pair's tags, a few beyond those asked for
	if err := r.pair.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.pair.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	r.waitBothUp()
	b := r.servers.B()
	standbyItems := 2 // the health subscription's
	if mode != uaclient.ModeWarm {
		standbyItems += tags
	}
	testutil.WaitFor(t, fmt.Sprintf("the standby to monitor %d items", standbyItems), time.Minute, func() bool {
		return b.Stats().MonitoredItems == standbyItems
	})
	created, read := b.Stats().ItemsCreated, b.Stats().NodesRead

	m := r.mark()
	b.Promote()
	r.servers.A().GracefulStop(time.Second)
	r.waitEvent(m, "failover", failoverTo(servicelevel.Backup))
	r.waitEvent(m, "backup active", activeUp(servicelevel.Backup))
	after := b.Stats().ItemsCreated - created
	// The snapshot takes the first samples that created and enabled items
	// report anyway; only the first batch (and ServiceLevel) is read.
	if readAfter := b.Stats().NodesRead - read; readAfter > uint64(tags)/4 {
		t.Errorf("the %s promotion read %d nodes for a snapshot of %d items: it must take the items' first samples", mode, readAfter, tags)
	} else {
		t.Logf("the %s promotion read %d nodes for a snapshot of %d items", mode, readAfter, tags)
	}
	switch {
	case wantCreates && after < uint64(tags):
		t.Fatalf("control: the %s promotion created %d items on the new server, want %d", mode, after, tags)
	case !wantCreates && after != 0:
		t.Fatalf("the %s promotion created %d items after the decision, want 0", mode, after)
	}

	ups := r.updatesSince(m)
	snaps := r.snapshots(ups)
	if len(snaps) != 1 || snaps[0].start.Endpoint != servicelevel.Backup || len(snaps[0].values) != tags {
		for _, sn := range snaps {
			t.Logf("snapshot %d from %s: %d values", sn.start.Epoch, sn.start.Endpoint, len(sn.values))
		}
		t.Fatalf("%d snapshots, want one of %d values from the backup", len(snaps), tags)
	}
	for _, u := range ups {
		if u.Value != nil && u.Value.Status == ua.StatusBadOutOfService {
			t.Fatalf("a Bad_OutOfService sample reached consumers: %+v", u)
		}
	}
	r.checkCounters(r.updatesSince(mark{}))
}
