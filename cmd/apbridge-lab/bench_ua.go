package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/internal/nodeopcua"
	"github.com/gopcua/opcua"
)

func uaScenarios() []scenario {
	return []scenario{
		{"ua-ingest", "tags of one OPC UA server (--tags, default 10,000) changing --hz times a second into the relay process, CPU per update and RSS beside a plain gopcua client process (--server node: node-opcua)", benchUAIngest},
		{"ua-connect", "connect time to node-opcua: security None against Basic256Sha256 SignAndEncrypt with a user name", benchUAConnect},
	}
}

// benchUAConnect measures what a session costs to open, as the relay opens
// one (endpoint discovery first when the channel is secured), against a
// server we did not write.
func benchUAConnect(ctx context.Context, cfg benchConfig) (*result, error) {
	dir, err := os.MkdirTemp("", "apbridge-ua-connect-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := nodeopcua.Start(ctx, nodeopcua.Config{
		Policies: []string{"None", "Basic256Sha256"}, Modes: []string{"None", "SignAndEncrypt"},
		Users: map[string]string{"relay": "bench"}, PKI: filepath.Join(dir, "server"),
	})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	secure := opcuasource.Security{Policy: "Basic256Sha256", Mode: "SignAndEncrypt",
		CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client.key"), Username: "relay", Password: "bench"}
	r := &result{Runs: cfg.runs}
	for _, c := range []struct {
		name string
		sec  opcuasource.Security
	}{{"none", opcuasource.Security{}}, {"sign_and_encrypt", secure}} {
		var times []float64
		for run := 1; run <= cfg.runs; run++ {
			d, err := connectOnce(ctx, c.sec, srv.Endpoint)
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", c.name, run, err)
			}
			times = append(times, ms(d))
		}
		fmt.Fprintf(cfg.progress, "  %s: p50 %.3f ms, p99 %.3f ms\n", c.name, percentile(times, 50), percentile(times, 99))
		r.set("connect_ms_"+c.name+"_p50", percentile(times, 50))
		r.set("connect_ms_"+c.name+"_p99", percentile(times, 99))
	}
	r.set("server", serverNode)
	return r, nil
}

// connectOnce opens and closes one session, as the relay's sources do.
func connectOnce(ctx context.Context, sec opcuasource.Security, endpoint string) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	opts, err := sec.ClientOptions(cctx, 0, endpoint)
	if err != nil {
		return 0, err
	}
	c, err := opcua.NewClient(endpoint, append(opts, opcua.AutoReconnect(false))...)
	if err != nil {
		return 0, err
	}
	if err := c.Connect(cctx); err != nil {
		return 0, err
	}
	d := time.Since(start)
	c.Close(cctx)
	return d, nil
}
