package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
)

// Where the edge scenarios run the site's servers (--site).
const (
	// siteInline runs them in the bench's process, beside the relay, the
	// source and the audit.
	siteInline = "inline"
	// siteProcess runs them in a process of their own, as a site runs
	// its servers and its relay: in one process the servers' heap (the
	// site stream's duplicate windows above all: about 1 GB late in a two
	// minute outage) is collected with the relay's, and the relay's
	// publishing waits while it is.
	siteProcess = "process"
)

// siteCmdLDM, followed by a node's client URL and a stream's name, puts
// that site node in lame-duck mode, restarts it and waits for the stream
// to be current again.
const siteCmdLDM = "ldm"

// edgeSiteAddr is what the site process tells the bench once it is up and
// linked to the hub.
type edgeSiteAddr struct {
	URLs []string `json:"urls"`
}

// runEdgeSite is the site process: it starts the site's leaf cluster of
// an edge, linked to the hub at --leaf (checked through --hub), prints
// its client URLs as one JSON line, obeys the site commands on stdin and
// stops when stdin ends.
func runEdgeSite(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("edge-site", flag.ContinueOnError)
	fs.SetOutput(stderr)
	leaf := fs.String("leaf", "", "the hub's leaf node URLs, comma-separated")
	hub := fs.String("hub", "", "the hub's client URLs, comma-separated")
	domain := fs.String("domain", "", "the site's JetStream domain")
	grace := fs.Duration("grace", 2*time.Second, "lame-duck grace period of the site's servers")
	compression := fs.String("leaf-compression", edgeLeafCompression, "how the site's servers compress what they send the hub")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *leaf == "" || *hub == "" || *domain == "" {
		return fmt.Errorf("edge-site: --leaf, --hub and --domain are required")
	}
	o := natstest.EdgeOptions{SiteDomain: *domain, Site: edgeSiteOptions(*grace, *compression)}
	site, err := natstest.StartSite(ctx, o, strings.Split(*leaf, ",")...)
	if err != nil {
		return err
	}
	defer site.Close()
	if err := waitLinkedTo(ctx, site, *hub, *domain); err != nil {
		return err
	}
	return serveCommands(os.Stdin, stdout, edgeSiteAddr{URLs: site.URLs()}, func(verb, arg string) error {
		switch verb {
		case siteCmdLDM:
			url, stream, ok := strings.Cut(arg, " ")
			if !ok {
				return fmt.Errorf("%s needs a URL and a stream", siteCmdLDM)
			}
			return ldmNode(ctx, site, url, stream)
		default:
			return fmt.Errorf("unknown command %q", verb)
		}
	})
}

// edgeSiteOptions are the site servers' options, whether they run in the
// bench's process or in the site's: a lame-duck grace period and the
// compression of what they send the hub.
func edgeSiteOptions(grace time.Duration, compression string) []natstest.Option {
	return []natstest.Option{natstest.WithLameDuck(grace+time.Second, grace), natstest.WithLeafCompression(compression)}
}

// waitLinkedTo waits, at most a minute, until site is linked to the hub
// at hubURLs.
func waitLinkedTo(ctx context.Context, site *natstest.Cluster, hubURLs, siteDomain string) error {
	nc, err := nats.Connect(hubURLs, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return natstest.WaitSiteLinked(wctx, site, nc, siteDomain)
}

// siteChild is the site process, seen from the bench.
type siteChild struct {
	*labProc
	addr edgeSiteAddr
}

// startSiteChild starts the site process (this executable's edge-site),
// leaf nodes of the hub at hub, and returns once it is linked.
func startSiteChild(ctx context.Context, cfg benchConfig, hub edgeHubAddr) (*siteChild, error) {
	c := &siteChild{}
	p, err := startLabProc(ctx, "site process", cfg.verbose, 0, &c.addr, "edge-site",
		"--leaf", strings.Join(hub.Leaf, ","), "--hub", strings.Join(hub.URLs, ","),
		"--domain", hub.SiteDomain, "--grace", cfg.grace.String(), "--leaf-compression", cfg.leafCompression)
	if err != nil {
		return nil, err
	}
	c.labProc = p
	return c, nil
}

func (c *siteChild) ldm(url, stream string) error {
	return c.do(siteCmdLDM + " " + url + " " + stream)
}

// ldmNode puts the node of site at the client URL url in lame-duck mode,
// restarts it and waits, at most a minute, for stream to be current again.
func ldmNode(ctx context.Context, site *natstest.Cluster, url, stream string) error {
	node := site.NodeByURL(url)
	if node == nil {
		return fmt.Errorf("no site node at %s", url)
	}
	select {
	case <-node.EnterLameDuck():
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := node.Restart(ctx); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return site.WaitStreamCurrent(wctx, stream)
}
