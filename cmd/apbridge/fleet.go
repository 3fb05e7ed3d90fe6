package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apbridge/apbridge/relay"
)

// runFleet is `apbridge fleet status --config FILE [--json]`: the fleet's
// leases as its bucket shows them, and each relay's config version; and
// `apbridge fleet apply` (runFleetApply).
func runFleet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "apply" {
		return runFleetApply(ctx, args[1:], stdout, stderr)
	}
	c, asJSON, err := parseStatus("fleet", "the config file of any relay of the fleet (YAML)", args, stderr)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	st, err := relay.FleetStatus(sctx, c)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	fmt.Fprintf(stdout, "bucket %s, lease TTL %v, %d relays live, config version %s\n", st.Bucket, st.LeaseTTL, len(st.Relays), strings.TrimSuffix(versionText(st.ConfigVersion), " (own file)"))
	printRelays(stdout, st)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
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

// parseStatus reads the arguments of `apbridge <cmd> status --config FILE
// [--json]`, the one subcommand of fleet and edge, and loads the config.
func parseStatus(cmd, configHelp string, args []string, stderr io.Writer) (*relay.Config, bool, error) {
	if len(args) == 0 || args[0] != "status" {
		return nil, false, fmt.Errorf("%s: the only subcommand is status (apbridge %s status --config FILE [--json])", cmd, cmd)
	}
	fs := flag.NewFlagSet(cmd+" status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", configHelp)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return nil, false, err
	}
	c, err := loadConfigFlag(*path, stderr)
	return c, *asJSON, err
}
