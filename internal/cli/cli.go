// Package cli is what the two commands, apbridge and apbridge-lab, share:
// subcommand dispatch with exit codes, usage, and the binaries' logger.
package cli

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

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// Hidden leaves the command out of the usage (a process another
	// command starts, not a user's).
	Hidden bool
}

// ExitError carries a process exit code out of a command, for a command
// that has already said what went wrong.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit %d", e.Code) }

// Run runs the subcommand args[0] of the program prog, with a context that
// SIGINT and SIGTERM cancel, and returns the process exit code: 0, the
// command's ExitError code, 1 for another error (printed), 2 for a usage
// error.
func Run(prog string, commands []Command, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(prog, commands, stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, c := range commands {
		if c.Name != args[0] {
			continue
		}
		err := c.Run(ctx, args[1:], stdout, stderr)
		var ee ExitError
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ee):
			return ee.Code
		default:
			fmt.Fprintf(stderr, "%s %s: %v\n", prog, c.Name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "%s: unknown command %q\n\n", prog, args[0])
	usage(prog, commands, stderr)
	return 2
}

func usage(prog string, commands []Command, w io.Writer) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\n", prog)
	for _, c := range commands {
		if !c.Hidden {
			fmt.Fprintf(w, "  %-9s %s\n", c.Name, c.Summary)
		}
	}
	fmt.Fprintf(w, "\nRun '%s <command> -h' for a command's flags.\n", prog)
}

// NewLogger returns a binary's logger: JSON lines, or console output with
// pretty.
func NewLogger(w io.Writer, pretty bool, level zerolog.Level) zerolog.Logger {
	if pretty {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}
