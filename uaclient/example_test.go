package uaclient_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
)

// A Pair on uaserver's redundant server pair. The primary (250) stops
// gracefully: it publishes ServiceLevel 0 as the backup promotes itself
// from the Warm standby level (90) to 250. The Pair moves the data to the
// backup and frames the move as a snapshot.
func ExamplePair() {
	ctx := context.Background()
	servers, err := uaserver.StartPair(ctx, uaserver.WithServiceLevels(250, 90))
	if err != nil {
		panic(err)
	}
	defer servers.Close()

	snapshots := make(chan uaclient.Update, 16)
	failovers := make(chan uaclient.Event, 16)
	p, err := uaclient.NewPair(uaclient.PairConfig{Endpoints: servers.Endpoints()},
		uaclient.WithDataHandler(func(u uaclient.Update) {
			if u.Kind == uaclient.UpdateRefreshEnd {
				snapshots <- u
			}
		}),
		uaclient.WithEventHandler(func(e uaclient.Event) {
			if e.Kind == uaclient.EventFailover {
				failovers <- e
			}
		}))
	if err != nil {
		panic(err)
	}
	defer p.Close()
	if _, err := p.AddItems(ctx, []uaclient.Item{
		{Handle: 1, NodeID: "ns=1;s=Counter0000"},
		{Handle: 2, NodeID: "ns=1;s=Ramp0001"},
	}); err != nil {
		panic(err)
	}
	if err := p.Start(ctx); err != nil {
		panic(err)
	}
	u := <-snapshots
	fmt.Printf("snapshot %d from %s: %d items\n", u.Epoch, u.Endpoint, u.Items)

	servers.B().Promote()
	servers.A().GracefulStop(time.Second)
	fmt.Println(<-failovers)
	u = <-snapshots
	fmt.Printf("snapshot %d from %s: %d items (%s)\n", u.Epoch, u.Endpoint, u.Items, u.Cause)

	// Output:
	// snapshot 1 from primary: 2 items
	// failover from primary to backup (ServiceLevel 0; backup reports 250)
	// snapshot 2 from backup: 2 items (ServiceLevel 0)
}
