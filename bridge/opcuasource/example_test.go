package opcuasource_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// A bridge relays the tags of a redundant OPC UA pair onto NATS. Here both
// sides run embedded; a real relay passes its brokers' URLs and its
// servers' endpoints.
func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cluster, err := natstest.Start(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	servers, err := uaserver.StartPair(ctx, uaserver.WithServiceLevels(250, 90))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer servers.Close()

	conn, err := apconn.Connect(ctx, cluster.URLs(), apconn.WithName("line1-relay"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	source, err := opcuasource.New("line1", uaclient.PairConfig{Endpoints: servers.Endpoints()})
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := bridge.New(conn, bridge.Config{Instance: "line1-relay"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	if err := b.AddSource(source, []bridge.TagConfig{{Name: "Counter", Address: "ns=1;s=Counter0000"}}); err != nil {
		fmt.Println(err)
		return
	}
	subject, _ := b.Subject("line1", "Counter")
	fmt.Println("subject:", subject)

	// Any NATS client can consume; this one shares the relay's connection.
	updates := make(chan *nats.Msg, 64)
	if _, err := conn.ChanSubscribe(subject, updates); err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for m := range updates {
		u, err := wire.DecodeJSON(m.Data)
		if err != nil {
			fmt.Println(err)
			return
		}
		if u.Status.Quality() != wire.QualityGood {
			continue // the first value may come before the server has one
		}
		typ, _ := wire.TypeOf(u.Value)
		fmt.Printf("%s: %s, quality header %s\n", u.Tag, typ, m.Header.Get(wire.HeaderQuality))
		break
	}
	// Output:
	// subject: apbridge.line1.Counter
	// Counter: Int64, quality header Good
}
