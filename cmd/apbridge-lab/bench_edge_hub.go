package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
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
// process (beside the relay) or in a process of its own, the hub here or
// in a process of its own.
type wanWorld struct {
	// site is the site cluster when it runs in this process, siteProc
	// the site's process when it runs in one: one of the two is set.
	site                  *natstest.Cluster
	siteProc              *siteChild
	siteDomain, hubDomain string
	// hubURLs and hubOpts reach the hub's client ports.
	hubURLs []string
	hubOpts []nats.Option
	link    wanLink
	close   func()
}

// siteURLs are the site's client URLs.
func (w *wanWorld) siteURLs() []string {
	if w.siteProc != nil {
		return w.siteProc.addr.URLs
	}
	return w.site.URLs()
}

// siteOpts are the options of a client of the site (none for the site
// process, which serves neither TLS nor users).
func (w *wanWorld) siteOpts() []nats.Option {
	if w.siteProc != nil {
		return nil
	}
	return w.site.ClientOptions()
}

// ldmNode puts the site node at a client URL in lame-duck mode, restarts
// it and waits for stream to be current again.
func (w *wanWorld) ldmNode(ctx context.Context, url, stream string) error {
	if w.siteProc != nil {
		return w.siteProc.ldm(url, stream)
	}
	return ldmNode(ctx, w.site, url, stream)
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
	o := natstest.EdgeOptions{Site: edgeSiteOptions(cfg.grace, cfg.leafCompression)}
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
	w := &wanWorld{siteDomain: hub.addr.SiteDomain, hubDomain: hub.addr.HubDomain, hubURLs: hub.addr.URLs, link: hub}
	if cfg.site == siteProcess {
		sc, err := startSiteChild(ctx, cfg, hub.addr)
		if err != nil {
			hub.stop()
			return nil, err
		}
		w.siteProc = sc
		w.close = func() { sc.stop(); hub.stop() }
		return w, nil
	}
	site, err := natstest.StartSite(ctx, o, hub.addr.Leaf...)
	if err != nil {
		hub.stop()
		return nil, err
	}
	w.site = site
	w.close = func() { site.Close(); hub.stop() }
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
	del(w.siteURLs(), w.siteOpts(), site)
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
	return serveCommands(os.Stdin, stdout, addr, func(verb, arg string) error {
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
				return err
			}
			e.SlowWAN(d)
		default:
			return fmt.Errorf("unknown command %q", verb)
		}
		return nil
	})
}

// hubChild is the hub process, seen from the bench.
type hubChild struct {
	*labProc
	addr edgeHubAddr
}

// startHubChild starts the hub process (this executable's edge-hub) at
// the given nice value and returns once it has said where it listens.
func startHubChild(ctx context.Context, verbose bool, nice int) (*hubChild, error) {
	h := &hubChild{}
	p, err := startLabProc(ctx, "hub process", verbose, nice, &h.addr, "edge-hub")
	if err != nil {
		return nil, err
	}
	h.labProc = p
	return h, nil
}

func (h *hubChild) cut() error    { return h.do(hubCmdCut) }
func (h *hubChild) freeze() error { return h.do(hubCmdFreeze) }
func (h *hubChild) heal() error   { return h.do(hubCmdHeal) }
func (h *hubChild) slow(d time.Duration) error {
	return h.do(hubCmdSlow + " " + d.String())
}
