package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/apbridge/apbridge/internal/cli"
)

// defaultHealthURL is the liveness endpoint of a relay with the default
// listener (http.listen ":9464") on this host.
const defaultHealthURL = "http://127.0.0.1:9464/healthz"

// runHealth is `apbridge health [--url URL] [--timeout D]`: it asks a
// relay's health endpoint and exits 0 when it answers 2xx, 1 otherwise,
// with the answer on stdout (stderr for a failure). It is the container
// image's HEALTHCHECK, which has no shell or curl to ask with.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	u := fs.String("url", defaultHealthURL, "the endpoint to ask: /healthz (alive) or /readyz (relaying)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *timeout <= 0 {
		return cli.Usagef("--timeout: %v is out of range (valid: more than 0, e.g. 5s)", *timeout)
	}
	if p, err := url.Parse(*u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return cli.Usagef("--url: %q is not an http(s) URL with a host (e.g. %s)", *u, defaultHealthURL)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	text := strings.TrimSpace(string(body))
	if resp.StatusCode/100 != 2 {
		fmt.Fprintf(stderr, "%s: %s: %s\n", *u, resp.Status, text)
		return cli.ExitError{Code: 1}
	}
	_, err = fmt.Fprintln(stdout, text)
	return err
}
