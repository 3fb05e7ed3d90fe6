package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/apbridge/apbridge/edge"
	"github.com/apbridge/apbridge/relay"
)

// runEdge is `apbridge edge status --config FILE [--json]`: the site
// stream, the hub stream's sourcing of it and the outage the site can
// absorb, checked now from the relay's own config.
func runEdge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, asJSON, err := parseStatus("edge", "the config file of the site's relay (YAML)", args, stderr)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := relay.EdgeStatus(sctx, c)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	printEdge(stdout, r)
	return nil
}

// printEdge writes the report for a person.
func printEdge(w io.Writer, r edge.Report) {
	s, h := r.Site, r.Hub
	fmt.Fprintf(w, "site stream %s (domain %s): %d messages, %s, sequences %d-%d, %d subjects\n",
		s.Stream, s.Domain, s.Msgs, bytesText(s.Bytes), s.FirstSeq, s.LastSeq, s.Subjects)
	fmt.Fprintf(w, "  limits: maxBytes %s (fill %.1f%%), maxMsgs %s, maxMsgsPerSubject %s, maxAge %s, discard %s\n",
		limitText(s.MaxBytes, bytesText(uint64(s.MaxBytes))), 100*s.FillBytes, limitText(s.MaxMsgs, fmt.Sprint(s.MaxMsgs)),
		limitText(s.MaxMsgsPerSubject, fmt.Sprint(s.MaxMsgsPerSubject)), limitText(int64(s.MaxAge), s.MaxAge.String()), s.Discard)
	fmt.Fprintf(w, "  rate: %.0f messages/s, %s/s\n", s.RateMsgs, bytesText(uint64(s.RateBytes)))
	fmt.Fprintf(w, "hub stream %s (domain %s): ", h.Stream, h.Domain)
	switch {
	case !h.Reachable:
		fmt.Fprintf(w, "not reachable: %s\n", h.Error)
	case !h.Sourcing:
		fmt.Fprintf(w, "does not source %s\n", s.Stream)
	default:
		fmt.Fprintf(w, "sources %s, lag %d messages, last heard from the site %v ago\n", s.Stream, h.Lag, h.Active.Round(time.Millisecond))
	}
	switch {
	case !h.LastCaughtUp.IsZero():
		fmt.Fprintf(w, "  hub last caught up: %s (%v ago)\n", h.LastCaughtUp.Format(time.RFC3339), time.Since(h.LastCaughtUp).Round(time.Second))
	case h.Reachable && h.Sourcing:
		fmt.Fprintf(w, "  hub behind: it has the site stream up to sequence %d of %d\n", h.Position, s.LastSeq)
	}
	known := ""
	if !r.UnsourcedKnown {
		known = " (the hub could not be asked: every message held counts)"
	}
	fmt.Fprintf(w, "unsourced: %d messages%s\n", r.Unsourced, known)
	if r.Unbounded {
		fmt.Fprintf(w, "absorbs: an outage of any length at the current rate (no traffic, no maxAge)\n")
	} else {
		fmt.Fprintf(w, "absorbs: a WAN outage of %v from now, at the current rate, before %s discards anything (floor %v)\n",
			r.Absorb.Round(time.Second), r.AbsorbLimit, r.OutageFloor)
	}
	for _, x := range r.Warnings {
		fmt.Fprintf(w, "WARNING: %s\n", x)
	}
}

func limitText(v int64, s string) string {
	if v <= 0 {
		return "none"
	}
	return s
}

func bytesText(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
