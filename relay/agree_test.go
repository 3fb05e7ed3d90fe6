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
)

// agreeBase is the config the agreement cases edit: one source whose
// servers are not there (a relay starts without them).
const agreeBase = `
nats: {servers: [%s]}
sources:
  - name: line1
    endpoints: [opc.tcp://127.0.0.1:1, opc.tcp://127.0.0.1:2]
    tags:
      - {name: Line1.Temp, address: "ns=2;s=Line1.Temp"}
      - {name: Line1.SP, address: "ns=2;s=Line1.SP", writable: true}
`

// TestValidateAndRunAgree: what `apbridge validate` accepts, `apbridge
// run` starts. Each input is parsed as both commands parse it (Parse);
// an accepted one must start on a cluster with JetStream. The cases are
// the edges where the start checks more than the fields: the stream's
// subjects, worked out from the tags or given, the fleet's bucket, the
// reserved subject spaces. An input validate refuses is refused by run
// too (run parses it the same way), so only acceptance can disagree.
func TestValidateAndRunAgree(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithNodes(1), natstest.WithJetStream())
	js := testutil.JetStream(t, cl.URLs()[0])
	const jsSink = "sink: jetstream\njetstream: {replicas: 1}\n"
	tagSubject := func(s string) [2]string {
		return [2]string{"writable: true}", "writable: true, subject: '" + s + "'}"}
	}
	browse := [2]string{"    tags:\n", "    browse: [{node: i=85}]\n    tags:\n"}
	for i, c := range []struct {
		name  string
		top   string      // added at the top level
		edits [][2]string // applied to the base
	}{
		{"core sink", "", nil},
		{"core sink, template and prefix of its own", "subject: 'plant.{source}.{tag}'\nservice: {prefix: plant-svc, name: plant}\n", nil},
		{"jetstream, subjects worked out", jsSink, nil},
		{"jetstream, subjects given", "sink: jetstream\njetstream: {replicas: 1, subjects: [apbridge.line1.>]}\n", nil},
		{"jetstream, a tag subject of its own under the source's root", jsSink, [][2]string{tagSubject("apbridge.line1.setpoints.SP")}},
		{"jetstream, browse roots", jsSink, [][2]string{browse}},
		{"jetstream, in a fleet", jsSink + "fleet: {relayId: agree, replicas: 1, leaseTTL: 1s}\n", nil},
		{"one endpoint that discovers its partner", "", [][2]string{{"[opc.tcp://127.0.0.1:1, opc.tcp://127.0.0.1:2]",
			"[opc.tcp://127.0.0.1:1]\n    discoverPartner: true\n    mode: hot"}}},
		{"two endpoints and discoverPartner", "", [][2]string{{"opc.tcp://127.0.0.1:2]", "opc.tcp://127.0.0.1:2]\n    discoverPartner: true"}}},
		// Refused by validate; they used to be accepted, and run failed
		// at the start (or, for the first, published on the JetStream
		// API).
		{"core sink, a tag on the JetStream API", "", [][2]string{tagSubject("$JS.API.STREAM.DELETE.PLANT")}},
		{"jetstream, a tag on the JetStream API", jsSink, [][2]string{tagSubject("$JS.API.STREAM.DELETE.PLANT")}},
		{"jetstream, the tags of a source under two roots", jsSink, [][2]string{tagSubject("setpoints.Line1.SP")}},
		{"jetstream, a tag beside the service subjects", jsSink, [][2]string{tagSubject("apbridge.setpoints.SP")}},
		{"jetstream, a stream on the JetStream API", "sink: jetstream\njetstream: {replicas: 1, subjects: [apbridge.line1.>, $JS.API.>]}\n", nil},
		{"jetstream, a template under a bucket", jsSink + "subject: '$KV.plant.{source}.{tag}'\n", nil},
		{"jetstream, a browse template that can reach the JetStream API", jsSink + "subject: '{tagid}.{source}'\n", [][2]string{browse}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfgText := fmt.Sprintf(agreeBase, cl.URLs()[0])
			for _, e := range c.edits {
				if !strings.Contains(cfgText, e[0]) {
					t.Fatalf("the edit %q does not apply", e[0])
				}
				cfgText = strings.Replace(cfgText, e[0], e[1], 1)
			}
			// A stream of its own per case: a deleted stream's store
			// directory is removed after the delete is answered, and a
			// new stream of the same name created at that moment fails
			// with "error creating store for stream" (10049).
			top := strings.ReplaceAll(c.top, "jetstream: {replicas: 1", fmt.Sprintf("jetstream: {stream: AGREE%d, replicas: 1", i))
			cfg, verr := relay.Parse([]byte(top + cfgText))
			if verr != nil {
				t.Logf("validate refuses it, and so does run: %v", verr)
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := relay.Start(ctx, cfg, relay.WithLogger(testutil.Logger(t)))
			if err != nil {
				t.Fatalf("validate accepts it, and run refuses it: %v", err)
			}
			if err := r.Close(); err != nil {
				t.Logf("close: %v", err)
			}
			// The next case's stream may take other subjects.
			for name := range js.StreamNames(ctx).Name() {
				if !strings.HasPrefix(name, "KV_") {
					if err := js.DeleteStream(ctx, name); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}
