package natstest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
)

// A test starts the cluster, connects a client and puts a broker into
// lame-duck mode under it.
func ExampleStart() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := natstest.Start(ctx, natstest.WithLameDuck(time.Second, 100*time.Millisecond))
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

// Options are checked before anything starts: a value no cluster could
// use is an error that names the option.
func ExampleOption() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := natstest.Start(ctx,
		natstest.WithReadyTimeout(10*time.Second),
		natstest.WithNodes(0),
	)
	fmt.Println(err)
	// Output: natstest: WithNodes(0): a cluster needs at least 1 node
}
