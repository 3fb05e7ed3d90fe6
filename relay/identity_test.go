package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// TestTrustRequestInfoFromConfig: service.trustRequestInfo reaches the
// write log. The same forged header is a claim by default and the user
// once the operator declares that only an import reaches the write
// subjects (the account layout itself is tested in bridge).
func TestTrustRequestInfoFromConfig(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	servers, err := uaserver.StartPair(ctx, uaserver.WithServiceLevels(250, 90))
	if err != nil {
		t.Fatal(err)
	}
	defer servers.Close()
	sp := servers.Setpoints()[0]
	for _, tc := range []struct {
		trust string
		want  string
	}{
		{"", `"user":"unknown","claimed_user":"PLANT/admin","identity":"unverified"`},
		{"trustRequestInfo: true", `"user":"PLANT/admin","identity":"server"`},
	} {
		t.Run(fmt.Sprintf("trust=%v", tc.trust != ""), func(t *testing.T) {
			cfg, err := relay.Parse(fmt.Appendf(nil, `
nats: {servers: [%s]}
http: {listen: ""}
service: {prefix: relay1, %s}
sources:
  - name: line1
    endpoints: [%s, %s]
    tags:
      - {name: SP, address: %q, writable: true}
`, cl.URLs()[0], tc.trust, servers.Endpoints()[0], servers.Endpoints()[1], sp.NodeID().String()))
			if err != nil {
				t.Fatal(err)
			}
			logs := &testutil.SyncBuffer{}
			r, err := relay.Start(ctx, cfg, relay.WithLogger(zerolog.New(logs)))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			nc, err := nats.Connect(cl.URLs()[0])
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			subject := "relay1.write.apbridge.line1.SP"
			testutil.WaitFor(t, "a write-back", 20*time.Second, func() bool {
				m := nats.NewMsg(subject)
				m.Data = []byte(`{"value":42.5}`)
				m.Header.Set("Nats-Request-Info", `{"acc":"PLANT","user":"admin"}`)
				rep, err := nc.RequestMsg(m, 2*time.Second)
				return err == nil && strings.Contains(string(rep.Data), `"ok":true`)
			})
			testutil.WaitFor(t, "the write log line", 5*time.Second, func() bool {
				for _, line := range strings.Split(logs.String(), "\n") {
					if strings.Contains(line, `"message":"write-back"`) {
						return strings.Contains(line, tc.want)
					}
				}
				return false
			})
		})
	}
}
