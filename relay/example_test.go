package relay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// A relay built from its configuration, as `apbridge run` builds it: here
// the brokers and the redundant OPC UA pair are embedded; a site's config
// names its own (docs/configuration.md).
func ExampleStart() {
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

	cfg, err := relay.Parse([]byte(fmt.Sprintf(`
instance: line1-relay
subject: plant.{source}.{tag}
nats:
  servers: [%s, %s]
sources:
  - name: line1
    endpoints: [%s, %s]
    tags:
      - {name: Counter, address: "ns=1;s=Counter0000"}
`, cluster.URLs()[0], cluster.URLs()[1], servers.Endpoints()[0], servers.Endpoints()[1])))
	if err != nil {
		fmt.Println(err)
		return
	}
	// Any NATS client can consume.
	nc, err := nats.Connect(cluster.URLs()[2])
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	updates := make(chan *nats.Msg, 64)
	if _, err := nc.ChanSubscribe("plant.line1.Counter", updates); err != nil {
		fmt.Println(err)
		return
	}
	nc.Flush()

	r, err := relay.Start(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	for m := range updates {
		u, err := wire.DecodeJSON(m.Data)
		if err != nil {
			fmt.Println(err)
			return
		}
		if u.Status.Quality() == wire.QualityGood {
			fmt.Printf("%s on %s: quality %s\n", u.Tag, m.Subject, u.Status.Quality())
			break
		}
	}
	// Output:
	// Counter on plant.line1.Counter: quality Good
}
