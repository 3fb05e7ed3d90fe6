package apconn_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/ldm"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
)

// A Conn is used like a nats.Conn. Here it runs on the embedded test
// cluster; a real application passes its brokers' URLs.
func ExampleConnect() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := natstest.Start(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()

	switches := make(chan apconn.Event, 1)
	conn, err := apconn.Connect(ctx, cluster.URLs(),
		apconn.WithName("tag-relay"),
		apconn.WithLameDuckHandling(ldm.SwitchToPassive),
		apconn.WithEventHandler(func(e apconn.Event) {
			if e.Kind == apconn.EventSwitched {
				switches <- e
			}
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	got := make(chan string, 1)
	if _, err := conn.Subscribe("plant.line1.temp", func(m *nats.Msg) { got <- string(m.Data) }); err != nil {
		fmt.Println(err)
		return
	}
	conn.Flush(ctx)
	conn.Publish("plant.line1.temp", []byte("21.5"))
	fmt.Println("received:", <-got)

	// Planned maintenance, by hand: the warm passive takes over.
	if err := conn.SwitchToPassive(ctx); err != nil {
		fmt.Println(err)
		return
	}
	e := <-switches
	fmt.Printf("switched (%s)\n", e.Cause)
	conn.Publish("plant.line1.temp", []byte("21.6"))
	fmt.Println("received:", <-got)
	// Output:
	// received: 21.5
	// switched (manual)
	// received: 21.6
}
