package faultproxy_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
)

// WithProxies puts a fault proxy in front of each node's client port (one
// can also sit in front of any TCP server: New). Freeze makes the
// link a black hole: no error, no data.
func ExampleProxy() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := natstest.Start(ctx, natstest.WithProxies())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	var proxy *faultproxy.Proxy = cluster.Node(0).Proxy()

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
