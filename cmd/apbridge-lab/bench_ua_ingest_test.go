package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/apbridge/apbridge/relay"
)

// A tiny ua-ingest, so that the scenario does not rot: 200 tags at 5 Hz,
// one window of 2 s, the relay and the plain gopcua client in processes of
// their own (this test binary, see TestMain). Both must have handled the
// tags' changes, and the relay's must have reached the subscriber.
func TestUAIngestShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an OPC UA pair, a broker and two processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	args := []string{"--json", "--relay-bin", exe, "--runs", "1", "--tags", "200", "--duration", "2s", "ua-ingest"}
	if err := runBench(ctx, args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	// 200 tags at 5 Hz: 1,000 changes a second offered (a Bool tag
	// changes every 8th tick only).
	for _, k := range []string{"updates_per_s", "plain_updates_per_s", "delivered_per_s"} {
		if v, _ := got[k].(float64); v < 500 || v > 1100 {
			t.Errorf("%s = %v, want 500-1100: %s", k, got[k], out.String())
		}
	}
	for _, k := range []string{"cpu_us_per_update", "plain_cpu_us_per_update", "cpu_ratio", "relay_rss_mib", "plain_rss_mib"} {
		if v, _ := got[k].(float64); v <= 0 {
			t.Errorf("%s = %v, want > 0: %s", k, got[k], out.String())
		}
	}
}

// On node-opcua at thousands of tags the relay gets the tolerances of a
// server that stalls (docs/servicelevel.md); elsewhere its defaults.
func TestIngestRelayConfigNodeTolerances(t *testing.T) {
	tags := func(n int) (names, nodes []string) {
		for i := range n {
			names, nodes = append(names, fmt.Sprintf("T%d", i)), append(nodes, fmt.Sprintf("ns=1;s=T%d", i))
		}
		return names, nodes
	}
	for _, tc := range []struct {
		server string
		tags   int
		want   bool
	}{
		{serverNode, 10000, true},
		{serverNode, 1001, true},
		{serverNode, 1000, false},
		{serverEmbedded, 10000, false},
	} {
		names, nodes := tags(tc.tags)
		conf := ingestRelayConfig(tc.server, []string{"nats://127.0.0.1:4222"}, "opc.tcp://127.0.0.1:4840", names, nodes)
		c, err := relay.Parse([]byte(conf))
		if err != nil {
			t.Fatalf("%s, %d tags: %v\n%s", tc.server, tc.tags, err, conf)
		}
		hb, rd := c.Sources[0].HeartbeatTimeoutMilliseconds, c.Sources[0].ReadTimeoutMilliseconds
		got := hb != nil && *hb == 3000 && rd != nil && *rd == 3000
		if got != tc.want || (!tc.want && (hb != nil || rd != nil)) {
			t.Errorf("%s, %d tags: heartbeat timeout %v, read timeout %v; want 3000 for both: %v", tc.server, tc.tags, hb, rd, tc.want)
		}
		if n := len(c.Sources[0].Tags); n != tc.tags {
			t.Errorf("%s: %d tags in the config, want %d", tc.server, n, tc.tags)
		}
	}
}
