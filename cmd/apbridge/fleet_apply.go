package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/internal/cli"
	"github.com/apbridge/apbridge/relay"
)

// fleetApplyTimeout bounds `fleet apply`'s connection and write.
const fleetApplyTimeout = 15 * time.Second

// runFleetApply is `apbridge fleet apply --config FILE [--wait D]
// [--json]`: the file becomes the fleet's next config version
// (relay.FleetApply), and it waits for every live relay to report it.
// It exits 1 when the file is refused, or when a relay could not apply
// the version or did not report it within --wait.
func runFleetApply(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleet apply", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the fleet's new config file (YAML): every relay of the fleet runs it")
	wait := fs.Duration("wait", 15*time.Second, "how long to wait for every live relay to report the version (0: do not wait)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return cli.Usagef("--config is required")
	}
	if *wait < 0 {
		return cli.Usagef("--wait: %v is not valid (0 or more)", *wait)
	}
	data, err := relay.ReadFile(*path)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, fleetApplyTimeout)
	a, err := relay.FleetApply(actx, data)
	cancel()
	if err != nil {
		for _, e := range relay.Errors(err) {
			fmt.Fprintln(stderr, e)
		}
		return cli.ExitError{Code: 1}
	}
	out := struct {
		relay.FleetApplied
		Relays []fleet.RelayStatus `json:"relays,omitempty"`
	}{FleetApplied: a}
	if !*asJSON {
		switch {
		case a.Unchanged:
			fmt.Fprintf(stdout, "unchanged: the fleet runs this config as version %d\n", a.Version)
		case a.Plan != nil:
			fmt.Fprintf(stdout, "version %d written (was %d): %s\n", a.Version, a.Previous, a.Plan.Summary())
		default:
			fmt.Fprintf(stdout, "version %d written (the fleet's first)\n", a.Version)
		}
	}
	var failed error
	if *wait > 0 {
		c, _ := relay.Parse(data) // FleetApply parsed it
		out.Relays, failed = waitApplied(ctx, c, a.Version, *wait)
		if !*asJSON {
			printRelays(stdout, fleet.Status{Relays: out.Relays})
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	if failed != nil {
		fmt.Fprintln(stderr, failed)
		return cli.ExitError{Code: 1}
	}
	return nil
}

// waitApplied polls the fleet's status until every live relay reports
// that it tried version v, or wait passes. The error says which relays
// did not apply it.
func waitApplied(ctx context.Context, c *relay.Config, v uint64, wait time.Duration) ([]fleet.RelayStatus, error) {
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, fleetApplyTimeout)
		st, err := relay.FleetStatus(sctx, c)
		cancel()
		if err != nil {
			return nil, err
		}
		var errs []error
		for _, r := range st.Relays {
			switch a := r.Applied; {
			case a == nil || a.Tried < v:
				errs = append(errs, fmt.Errorf("relay %s: has not reported version %d yet", r.ID, v))
			case a.Version != v && a.Tried == v:
				errs = append(errs, fmt.Errorf("relay %s: version %d not applied (runs %s): %s", r.ID, v, versionText(a.Version), a.Error))
			}
		}
		pending := false
		for _, r := range st.Relays {
			pending = pending || r.Applied == nil || r.Applied.Tried < v
		}
		if !pending || time.Now().After(deadline) {
			return st.Relays, errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return st.Relays, ctx.Err()
		case <-tick.C:
		}
	}
}

// printRelays prints the live relays and the config version each runs.
func printRelays(w io.Writer, st fleet.Status) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "relay\tjoined\trenewed ago\tconfig version\tnot applied\t")
	for _, r := range st.Relays {
		runs, failed := "-", ""
		if a := r.Applied; a != nil {
			runs = versionText(a.Version)
			if a.Error != "" {
				failed = fmt.Sprintf("version %d: %s", a.Tried, a.Error)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t\n", r.ID, r.Since.Format(time.RFC3339), r.Renewed.Round(time.Millisecond), runs, failed)
	}
	tw.Flush()
}

// versionText is a fleet config version as status prints it.
func versionText(v uint64) string {
	if v == 0 {
		return "none (own file)"
	}
	return fmt.Sprint(v)
}
