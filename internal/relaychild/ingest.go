package relaychild

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/internal/procstat"
	"github.com/apbridge/apbridge/relay"
	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

// IngestSummary is what an ingest process prints after its window: the
// updates it handled in the window and the CPU its process spent in it.
type IngestSummary struct {
	Updates  uint64  `json:"updates"`
	CPUUs    int64   `json:"cpu_us"`
	WindowMs int64   `json:"window_ms"`
	RSS      float64 `json:"rss_mib"`
	PeakRSS  float64 `json:"peak_rss_mib"`
	PeakHeap float64 `json:"peak_heap_inuse_mib"`
	ReadyRSS float64 `json:"ready_rss_mib"`
}

// RunIngest is the process `apbridge-lab bench ua-ingest` measures: the
// relay (--config, a relay config with one OPC UA source) or, with --plain,
// a plain gopcua client that subscribes the same items with gopcua's own
// subscription API and only counts the notifications. It prints "ready"
// once every item has its first value, waits for a line "go" on stdin, then
// measures one window of --window and prints an IngestSummary; a second
// "go" measures another window, the end of stdin ends it. The CPU is the
// process's own (getrusage) over the window alone, so that subscribing
// does not count. It is not a user command.
func RunIngest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ingest-child", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", "", "the relay's config file (the relay)")
	plain := fs.Bool("plain", false, "a plain gopcua client instead of the relay")
	endpoint := fs.String("endpoint", "", "--plain: the server")
	nodes := fs.String("nodes", "", "--plain: a file of node IDs, one a line")
	publishing := fs.Duration("publishing", 100*time.Millisecond, "--plain: the publishing interval")
	sampling := fs.Duration("sampling", 100*time.Millisecond, "--plain: the sampling interval")
	window := fs.Duration("window", 10*time.Second, "how long one measured window lasts")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measured windows to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile (what is held, and what was allocated since the start) to this file at the end")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var count func() uint64
	if *plain {
		c, n, err := startPlain(ctx, *endpoint, *nodes, *publishing, *sampling)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		count = n
	} else {
		c, err := relay.Load(*config)
		if err != nil {
			return err
		}
		// The relay's warnings go to stderr, which the bench shows: a
		// relay that loses its sessions or cannot subscribe says why
		// instead of only counting nothing. Warnings are rare, so they
		// cost the measured windows nothing.
		rl, err := relay.Start(ctx, c, relay.WithLogger(zerolog.New(stderr).Level(zerolog.WarnLevel).With().Timestamp().Logger()))
		if err != nil {
			return err
		}
		defer rl.Close()
		b := rl.Bridge()
		count = func() uint64 {
			var n uint64
			for _, s := range b.Stats() {
				n += s.Published
			}
			return n
		}
		want := 0
		for _, s := range c.Sources {
			want += len(s.Tags)
		}
		// Ready once every tag has a Good or Uncertain value: a Bad one
		// (waiting for its initial data, out of service) is no sign that
		// values flow, and a relay that cannot keep a session must fail
		// here, with its log, not look ready and count nothing.
		deadline := time.Now().Add(2 * time.Minute)
		for good := 0; good < want; {
			if time.Now().After(deadline) {
				return fmt.Errorf("ingest-child: %d of the relay's %d tags Good or Uncertain after 2m: see its log", good, want)
			}
			if err := ctxtime.Sleep(ctx, 20*time.Millisecond); err != nil {
				return err
			}
			good = 0
			for _, s := range b.Stats() {
				good += s.Good + s.Uncertain
			}
		}
	}
	readyRSS := procstat.CurrentRSS()
	fmt.Fprintln(stdout, "ready")
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		// After the last window; deferred last, so it runs before the
		// relay or the client closes.
		defer func() {
			if err := writeHeapProfile(*memProfile); err != nil {
				fmt.Fprintf(stderr, "ingest-child: %v\n", err)
			}
		}()
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if strings.TrimSpace(in.Text()) != "go" {
			continue
		}
		stop := procstat.SampleHeap(50 * time.Millisecond)
		n0, cpu0, t0 := count(), procstat.CPUTime(), time.Now()
		if err := ctxtime.Sleep(ctx, *window); err != nil {
			stop()
			return err
		}
		n1, cpu1, el := count(), procstat.CPUTime(), time.Since(t0)
		peaks := stop()
		b, err := json.Marshal(IngestSummary{Updates: n1 - n0, CPUUs: (cpu1 - cpu0).Microseconds(), WindowMs: el.Milliseconds(),
			RSS: procstat.CurrentRSS(), PeakRSS: procstat.PeakRSS(), PeakHeap: float64(peaks.InUse) / (1 << 20), ReadyRSS: readyRSS})
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	}
	return in.Err()
}

// startPlain subscribes the nodes of the file with gopcua's subscription
// API, as an application would that uses gopcua directly, and counts the
// data changes notified. It returns once every item has notified its first
// value.
func startPlain(ctx context.Context, endpoint, nodesFile string, publishing, sampling time.Duration) (*opcua.Client, func() uint64, error) {
	b, err := os.ReadFile(filepath.Clean(nodesFile))
	if err != nil {
		return nil, nil, err
	}
	var ids []*ua.NodeID
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		id, err := ua.ParseNodeID(strings.TrimSpace(line))
		if err != nil {
			return nil, nil, fmt.Errorf("--nodes: %w", err)
		}
		ids = append(ids, id)
	}
	c, err := opcua.NewClient(endpoint, opcua.SecurityMode(ua.MessageSecurityModeNone), opcua.AutoReconnect(false))
	if err != nil {
		return nil, nil, err
	}
	if err := c.Connect(ctx); err != nil {
		return nil, nil, err
	}
	var n atomic.Uint64
	ch := make(chan *opcua.PublishNotificationData, 64)
	sub, err := c.Subscribe(ctx, &opcua.SubscriptionParameters{Interval: publishing}, ch)
	if err != nil {
		c.Close(ctx)
		return nil, nil, err
	}
	// The counter: all the client does with what it receives. It ends
	// when the client closes the channel's subscription.
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-ch:
				if m == nil {
					return
				}
				if dc, ok := m.Value.(*ua.DataChangeNotification); ok {
					n.Add(uint64(len(dc.MonitoredItems)))
				}
			}
		}
	}()
	const batch = 500 // the relay's subscribeBatchSize default
	for i := 0; i < len(ids); i += batch {
		var reqs []*ua.MonitoredItemCreateRequest
		for j, id := range ids[i:min(i+batch, len(ids))] {
			r := opcua.NewMonitoredItemCreateRequestWithDefaults(id, ua.AttributeIDValue, uint32(i+j+1))
			r.RequestedParameters.SamplingInterval = float64(sampling) / float64(time.Millisecond)
			reqs = append(reqs, r)
		}
		res, err := sub.Monitor(ctx, ua.TimestampsToReturnBoth, reqs...)
		if err == nil && res.ResponseHeader.ServiceResult != ua.StatusOK {
			err = res.ResponseHeader.ServiceResult
		}
		if err != nil {
			c.Close(ctx)
			return nil, nil, fmt.Errorf("monitor: %w", err)
		}
		for k, r := range res.Results {
			if r.StatusCode != ua.StatusOK {
				c.Close(ctx)
				return nil, nil, fmt.Errorf("monitor %v: %w", reqs[k].ItemToMonitor.NodeID, r.StatusCode)
			}
		}
	}
	deadline := time.Now().Add(time.Minute)
	for n.Load() < uint64(len(ids)) {
		if time.Now().After(deadline) {
			c.Close(ctx)
			return nil, nil, errors.New("the items' first values did not all come within a minute")
		}
		if err := ctxtime.Sleep(ctx, 20*time.Millisecond); err != nil {
			c.Close(ctx)
			return nil, nil, err
		}
	}
	return c, n.Load, nil
}
