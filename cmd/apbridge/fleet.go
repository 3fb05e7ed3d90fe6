package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apbridge/apbridge/relay"
)

// runFleet is `apbridge fleet status --config FILE [--json]`: the fleet's
// leases as its bucket shows them.
func runFleet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "status" {
		return errors.New("fleet: the only subcommand is status (apbridge fleet status --config FILE [--json])")
	}
	fs := flag.NewFlagSet("fleet status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the config file of any relay of the fleet (YAML)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	c, err := loadConfigFlag(*path, stderr)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	st, err := relay.FleetStatus(sctx, c)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	fmt.Fprintf(stdout, "bucket %s, lease TTL %v, %d relays live\n", st.Bucket, st.LeaseTTL, len(st.Relays))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "relay\tjoined\trenewed ago\t")
	for _, r := range st.Relays {
		fmt.Fprintf(tw, "%s\t%s\t%v\t\n", r.ID, r.Since.Format(time.RFC3339), r.Renewed.Round(time.Millisecond))
	}
	tw.Flush()
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "source\towner\trevision\trenewed ago\tplacement (first owns, next stands by)\t")
	for _, p := range st.Pairs {
		owner, ago := p.Owner, p.Renewed.Round(time.Millisecond).String()
		if owner == "" {
			owner, ago = "(none)", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t\n", p.Pair, owner, p.Revision, ago, strings.Join(p.Ranked, " > "))
	}
	return tw.Flush()
}
