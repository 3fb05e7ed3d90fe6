package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Where the edge scenarios run the hub cluster (--hub).
const (
	// hubProcess runs it in a process of its own: a hub and a site are
	// different machines, and in one process the hub's storing of a
	// catch-up grows the heap the site's servers and relay share, and
	// its garbage collection (with its mark assists) stalls them.
	hubProcess = "process"
	// hubInline runs it in the bench's process, beside the site.
	hubInline = "inline"
)

// wanWorld is the edge a WAN scenario runs on: the site cluster in this
// process (beside the relay), the hub here or in a process of its own.
type wanWorld struct {
	site                  *natstest.Cluster
	siteDomain, hubDomain string
	// hubURLs and hubOpts reach the hub's client ports.
	hubURLs []string
	hubOpts []nats.Option
	link    wanLink
	close   func()
}

// wanLink cuts, freezes, slows and heals the WAN.
type wanLink interface {
	cut() error
	freeze() error
	heal() error
	slow(oneWay time.Duration) error
}

// startWANWorld starts the hub (as cfg.hub says) and the site of the WAN
// scenarios, linked.
func startWANWorld(ctx context.Context, cfg benchConfig) (*wanWorld, error) {
	o := natstest.EdgeOptions{Site: []natstest.Option{natstest.WithLameDuck(cfg.grace+time.Second, cfg.grace)}}
	if cfg.hub == hubInline {
		e, err := natstest.StartEdge(ctx, o)
		if err != nil {
			return nil, err
		}
		return &wanWorld{site: e.Site, siteDomain: e.SiteDomain, hubDomain: e.HubDomain,
			hubURLs: e.Hub.URLs(), hubOpts: e.Hub.ClientOptions(), link: edgeLink{e}, close: e.Close}, nil
	}
	hub, err := startHubChild(ctx, cfg.verbose, cfg.hubNice)
	if err != nil {
		return nil, err
	}
	site, err := natstest.StartSite(ctx, o, hub.addr.Leaf...)
	if err != nil {
		hub.stop()
		return nil, err
	}
	w := &wanWorld{site: site, siteDomain: hub.addr.SiteDomain, hubDomain: hub.addr.HubDomain, hubURLs: hub.addr.URLs, link: hub,
		close: func() { site.Close(); hub.stop() }}
	nc, err := w.hubConn()
	if err != nil {
		w.close()
		return nil, err
	}
	defer nc.Close()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := natstest.WaitSiteLinked(wctx, site, nc, w.siteDomain); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// hubConn connects to the hub.
func (w *wanWorld) hubConn() (*nats.Conn, error) {
	return nats.Connect(strings.Join(w.hubURLs, ","), append(w.hubOpts, nats.MaxReconnects(-1))...)
}

// sourceFromSite creates the hub stream name sourcing siteStream, its
// source consumer capped at rate bits/s (0: no cap).
func (w *wanWorld) sourceFromSite(ctx context.Context, name, siteStream string, rate uint64) error {
	nc, err := w.hubConn()
	if err != nil {
		return err
	}
	defer nc.Close()
	return natstest.SourceFromSiteOn(ctx, nc, w.siteDomain, name, siteStream, 3, natstest.WithCatchupRate(rate))
}

// deleteStreams removes a run's streams, so that the next run's
// reservations fit on the disk. The relay itself never deletes a stream.
func (w *wanWorld) deleteStreams(site, hub string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	del := func(urls []string, opts []nats.Option, name string) {
		nc, err := nats.Connect(strings.Join(urls, ","), opts...)
		if err != nil {
			return
		}
		defer nc.Close()
		if js, err := jetstream.New(nc); err == nil {
			js.DeleteStream(ctx, name)
		}
	}
	del(w.hubURLs, w.hubOpts, hub)
	del(w.site.URLs(), w.site.ClientOptions(), site)
}

// edgeLink is the WAN of an Edge in this process.
type edgeLink struct{ e *natstest.Edge }

func (l edgeLink) cut() error                 { l.e.CutWAN(); return nil }
func (l edgeLink) freeze() error              { l.e.FreezeWAN(); return nil }
func (l edgeLink) heal() error                { l.e.HealWAN(); return nil }
func (l edgeLink) slow(d time.Duration) error { l.e.SlowWAN(d); return nil }

// edgeHubAddr is what the hub process tells the bench once it is up.
type edgeHubAddr struct {
	URLs       []string `json:"urls"`
	Leaf       []string `json:"leaf"`
	HubDomain  string   `json:"hub_domain"`
	SiteDomain string   `json:"site_domain"`
}

// Commands of the hub process, one a line on its stdin; it answers each
// with a line "ok" or "error: ...".
const (
	hubCmdCut    = "cut"
	hubCmdFreeze = "freeze"
	hubCmdHeal   = "heal"
	hubCmdSlow   = "slow" // followed by a duration
)

// runEdgeHub is the hub process: it starts the hub cluster of an edge,
// prints its addresses as one JSON line, obeys the WAN commands on stdin
// and stops when stdin ends (the bench closed it, or died).
func runEdgeHub(ctx context.Context, _ []string, stdout, _ io.Writer) error {
	e, err := natstest.StartHub(ctx, natstest.EdgeOptions{})
	if err != nil {
		return err
	}
	defer e.Close()
	addr := edgeHubAddr{URLs: e.Hub.URLs(), Leaf: e.LeafURLs(), HubDomain: e.HubDomain, SiteDomain: e.SiteDomain}
	if err := json.NewEncoder(stdout).Encode(addr); err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		verb, arg, _ := strings.Cut(strings.TrimSpace(in.Text()), " ")
		reply := "ok"
		switch verb {
		case hubCmdCut:
			e.CutWAN()
		case hubCmdFreeze:
			e.FreezeWAN()
		case hubCmdHeal:
			e.HealWAN()
		case hubCmdSlow:
			d, err := time.ParseDuration(arg)
			if err != nil {
				reply = "error: " + err.Error()
				break
			}
			e.SlowWAN(d)
		default:
			reply = fmt.Sprintf("error: unknown command %q", verb)
		}
		if _, err := fmt.Fprintln(stdout, reply); err != nil {
			return err
		}
	}
	return in.Err()
}

// hubChild is the hub process, seen from the bench.
type hubChild struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	addr edgeHubAddr
	mu   sync.Mutex // one command at a time
	once sync.Once
}

// startHubChild starts the hub process (this executable's edge-hub) at
// the given nice value and returns once it has said where it listens.
func startHubChild(ctx context.Context, verbose bool, nice int) (*hubChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "edge-hub")
	if verbose {
		cmd.Stderr = os.Stderr
	}
	in, out, err := startLabChild(cmd, nice)
	if err != nil {
		return nil, fmt.Errorf("hub process: %w", err)
	}
	h := &hubChild{cmd: cmd, in: in, out: out}
	first := make(chan error, 1)
	go func() {
		if !h.out.Scan() {
			first <- fmt.Errorf("hub process ended before it was up: %v", h.out.Err())
			return
		}
		first <- json.Unmarshal(h.out.Bytes(), &h.addr)
	}()
	select {
	case err = <-first:
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(2 * time.Minute):
		err = errors.New("hub process: not up within 2 minutes")
	}
	if err == nil && nice != 0 {
		err = renice(cmd, nice) // its threads are all made by now
	}
	if err != nil {
		h.stop()
		return nil, err
	}
	return h, nil
}

// do sends one command and waits for its answer.
func (h *hubChild) do(line string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := fmt.Fprintln(h.in, line); err != nil {
		return fmt.Errorf("hub process: %s: %w", line, err)
	}
	if !h.out.Scan() {
		return fmt.Errorf("hub process: %s: no answer (%v)", line, h.out.Err())
	}
	if r := h.out.Text(); r != "ok" {
		return fmt.Errorf("hub process: %s: %s", line, r)
	}
	return nil
}

func (h *hubChild) cut() error    { return h.do(hubCmdCut) }
func (h *hubChild) freeze() error { return h.do(hubCmdFreeze) }
func (h *hubChild) heal() error   { return h.do(hubCmdHeal) }
func (h *hubChild) slow(d time.Duration) error {
	return h.do(hubCmdSlow + " " + d.String())
}

// stop ends the hub process: its stdin closed, it shuts its cluster down;
// killed if it has not within 30 s. Idempotent; it waits for the process.
func (h *hubChild) stop() {
	h.once.Do(func() {
		h.in.Close()
		done := make(chan struct{})
		go func() { h.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			h.cmd.Process.Kill()
			<-done
		}
	})
}
