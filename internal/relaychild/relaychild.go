// Package relaychild is the relay process that the relay-throughput
// benchmark measures; see Run.
package relaychild

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/internal/procstat"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// Run is the process `apbridge-lab bench relay-throughput` measures: a
// relay with a simulated source (or, with --plain, a plain nats.go
// publisher of the same messages), alone in its process so that its CPU and
// memory can be read from /proc. The relay binary runs it as a hidden
// command, so that what is measured is the binary users run, not the lab
// with its embedded servers. It is not a user command.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("relay-child", flag.ContinueOnError)
	fs.SetOutput(stderr)
	servers := fs.String("nats", "", "comma-separated NATS URLs")
	tags := fs.Int("tags", 10000, "simulated tags")
	period := fs.Duration("period", 0, "emit every tag once per period, spread evenly over it; 0 emits flat out")
	duration := fs.Duration("duration", 10*time.Second, "how long to publish")
	plain := fs.Bool("plain", false, "publish the same messages with plain nats.go instead of the relay")
	profile := fs.String("profile", "", "write a heap profile to this file at the end")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the publishing to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	urls := strings.Split(*servers, ",")
	var emit func() int
	var emitSome func(n int) int
	var flush func(context.Context) error
	var stats func() any
	if *plain {
		nc, err := nats.Connect(urls[0])
		if err != nil {
			return err
		}
		defer nc.Close()
		subjects := make([]string, *tags)
		names := make([]string, *tags)
		for i := range subjects {
			names[i] = "Line1.T" + strconv.Itoa(i)
			subjects[i] = "apbridge.sim.Line1.T" + strconv.Itoa(i)
		}
		counts := make([]uint64, *tags)
		var buf []byte
		// publishOne publishes tag i's next update as the relay would
		// encode it.
		publishOne := func(i int, now time.Time) error {
			counts[i]++
			u := wire.Update{Tag: names[i], Value: int64(counts[i]), Status: wire.StatusGood, SourceTime: now, ServerTime: now, Seq: counts[i]}
			buf, _ = wire.AppendJSON(buf[:0], &u)
			m := &nats.Msg{Subject: subjects[i], Data: buf, Header: make(nats.Header, 8)}
			wire.SetHeaders(m.Header, &u)
			return nc.PublishMsg(m)
		}
		emit = func() int {
			now := time.Now()
			for i := range subjects {
				if publishOne(i, now) != nil {
					return i
				}
			}
			return len(subjects)
		}
		next := 0
		emitSome = func(n int) int {
			now := time.Now()
			for k := 0; k < n; k++ {
				if publishOne(next%len(subjects), now) != nil {
					return k
				}
				next++
			}
			return n
		}
		flush = nc.FlushWithContext
		stats = func() any { return nc.Stats() }
	} else {
		src := &counterSource{}
		tcs := make([]bridge.TagConfig, *tags)
		for i := range tcs {
			tcs[i] = bridge.TagConfig{Name: "Line1.T" + strconv.Itoa(i), Address: "ns=1;s=T" + strconv.Itoa(i)}
		}
		rl, err := relay.Start(ctx, &relay.Config{NATS: relay.NATSConfig{Servers: urls}}, relay.WithSource(src, tcs))
		if err != nil {
			return err
		}
		defer rl.Close()
		b, conn := rl.Bridge(), rl.Conn()
		for src.subscribed() < *tags {
			if err := ctxtime.Sleep(ctx, 10*time.Millisecond); err != nil {
				return err
			}
		}
		emit = src.emitAll
		emitSome = src.emitSome
		flush = conn.Flush
		stats = func() any { return b.Stats() }
	}
	readyRSS, readyAnon, readyFile := procstat.CurrentRSS(), procstat.RSSAnon(), procstat.RSSFile()
	fmt.Fprintln(stdout, "ready")
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	stopSampling := procstat.SampleHeap(50 * time.Millisecond)
	start := time.Now()
	deadline := start.Add(*duration)
	var sent int
	if *period > 0 {
		// Paced: every millisecond, the tags due by then.
		rate := float64(*tags) / period.Seconds()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for time.Now().Before(deadline) && ctx.Err() == nil {
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
			if due := int(rate*time.Since(start).Seconds()) - sent; due > 0 {
				sent += emitSome(due)
			}
		}
	} else {
		for time.Now().Before(deadline) && ctx.Err() == nil {
			sent += emit()
		}
	}
	if *profile != "" {
		if err := writeHeapProfile(*profile); err != nil {
			return err
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	flush(fctx)
	peaks := stopSampling()
	b, _ := json.Marshal(map[string]any{"sent": sent, "peak_heap_inuse_mib": float64(peaks.InUse) / (1 << 20),
		"peak_go_sys_mib": float64(peaks.Sys) / (1 << 20), "peak_rss_mib": procstat.PeakRSS(), "ready_rss_mib": readyRSS, "ready_rss_anon_mib": readyAnon, "ready_rss_file_mib": readyFile,
		"peak_rss_anon_mib": peaks.RSSAnon, "stats": stats()})
	fmt.Fprintln(stdout, string(b))
	return nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.Lookup("heap").WriteTo(f, 0)
}
