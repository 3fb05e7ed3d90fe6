package testcluster_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/testcluster"
	"github.com/nats-io/nats.go"
)

// A test starts the cluster, connects a client and puts a broker into
// lame-duck mode under it.
func ExampleStartNATS() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := testcluster.StartNATS(ctx, testcluster.WithLameDuck(time.Second, 100*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	fmt.Println("nodes:", len(cluster.Nodes()))

	noticed := make(chan struct{}, 1)
	nc, err := nats.Connect(cluster.Node(0).URL(), nats.LameDuckModeHandler(func(*nats.Conn) { noticed <- struct{}{} }))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()

	down := cluster.Node(0).EnterLameDuck() // returns at once
	<-noticed
	fmt.Println("lame-duck notice received")
	<-down
	fmt.Println("node 0 running:", cluster.Node(0).Running())
	// Output:
	// nodes: 3
	// lame-duck notice received
	// node 0 running: false
}

// The logger, the client round-trip time and the readiness bound are
// options of both constructors; every other option belongs to one, and the
// other constructor refuses it by name before it starts anything.
func ExampleOption() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := testcluster.StartNATS(ctx,
		testcluster.WithReadyTimeout(10*time.Second),
		testcluster.WithSetpoints(4),
	)
	fmt.Println(err)
	// Output: testcluster: WithSetpoints applies to an OPC UA pair, not a NATS cluster
}
