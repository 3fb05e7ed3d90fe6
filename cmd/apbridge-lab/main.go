// Command apbridge-lab runs the relay on the embedded test cluster (three
// NATS brokers, a redundant OPC UA server pair, a fault proxy): the
// scripted maintenance demo and the failover benchmarks. It is not the
// relay a site runs (that is apbridge, which links none of this).
//
//	apbridge-lab demo                        scripted maintenance on the embedded cluster
//	apbridge-lab bench [flags] [SCENARIO...] failover benchmarks on the embedded cluster
//
// Run `apbridge-lab help` for the flags of each command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand of apbridge-lab.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"demo", "run the scripted maintenance demo on the embedded cluster", runDemo},
		{"bench", "run failover benchmarks on the embedded cluster", runBench},
	}
}

// exitError carries a process exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if args[0] == "relay-child" { // a process the relay-throughput benchmark starts
		if err := runRelayChild(ctx, args[1:], stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "apbridge-lab relay-child: %v\n", err)
			return 1
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		var ee exitError
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ee):
			return ee.code
		default:
			fmt.Fprintf(stderr, "apbridge-lab %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "apbridge-lab: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: apbridge-lab <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'apbridge-lab <command> -h' for a command's flags.")
}

// newLogger returns the binary's logger: JSON lines, or console output
// with pretty.
func newLogger(w io.Writer, pretty bool, level zerolog.Level) zerolog.Logger {
	if pretty {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}
