package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"testing"
	"time"
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
