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

// WithProxies puts a fault proxy in front of each node's client port (one
// can also sit in front of any TCP server: NewFaultProxy). Freeze makes the
// link a black hole: no error, no data.
func ExampleFaultProxy() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := testcluster.StartNATS(ctx, testcluster.WithProxies())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	proxy := cluster.Node(0).Proxy()

	nc, err := nats.Connect(cluster.Node(0).URL(), nats.NoReconnect())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	fmt.Println("flush:", nc.FlushTimeout(time.Second))

	proxy.Freeze()
	fmt.Println("flush while frozen:", nc.FlushTimeout(200*time.Millisecond))
	proxy.Heal()
	fmt.Println("flush after heal:", nc.FlushTimeout(time.Second))
	// Output:
	// flush: <nil>
	// flush while frozen: nats: timeout
	// flush after heal: <nil>
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
