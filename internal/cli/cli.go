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

// usageError is a command line the command cannot run: a bad flag or
// value, or an argument too many. Run exits with status 2 for it, as
// the flag package and POSIX utilities do.
type usageError struct {
	Err error
	// Printed is set when the message is already on stderr (the flag
	// package prints its own).
	Printed bool
}

func (e usageError) Error() string { return e.Err.Error() }

func (e usageError) Unwrap() error { return e.Err }

// Usagef returns a usage error with a message for Run to print; Run exits
// with status 2 for it.
func Usagef(format string, a ...any) error {
	return usageError{Err: fmt.Errorf(format, a...)}
}

// Parse parses a command's flags: -h prints the flags on stdout (help
// asked for is output, not an error) and returns flag.ErrHelp; a bad flag
// or an argument left over is a usage error (as Usagef's), with the flags
// on stderr.
func Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fmt.Fprintf(stdout, "usage of %s:\n", fs.Name())
		fs.PrintDefaults()
		return err
	case err != nil:
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	default:
		return nil
	}
	fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
	fs.SetOutput(stderr)
	fmt.Fprintf(stderr, "usage of %s:\n", fs.Name())
	fs.PrintDefaults()
	return usageError{Err: err, Printed: true}
}

// Run runs the subcommand args[0] of the program prog, with a context that
// SIGINT and SIGTERM cancel, and returns the process exit code: 0, the
// command's ExitError code, 1 for another error (printed), 2 for a usage
// error. "help" (or -h, --help) prints the usage on stdout, "help CMD"
// the command's flags; --version runs the "version" command if there is
// one.
func Run(prog string, commands []Command, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(prog, commands, stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) == 1 {
			usage(prog, commands, stdout)
			return 0
		}
		if len(args) > 2 {
			fmt.Fprintf(stderr, "%s help: one command at a time\n", prog)
			return 2
		}
		args = []string{args[1], "-h"}
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, c := range commands {
		if c.Name != args[0] {
			continue
		}
		err := c.Run(ctx, args[1:], stdout, stderr)
		var ee ExitError
		var ue usageError
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ee):
			return ee.Code
		case errors.As(err, &ue):
			if !ue.Printed {
				fmt.Fprintf(stderr, "%s %s: %v\n", prog, c.Name, err)
			}
			return 2
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
	fmt.Fprintf(w, "\nRun '%s help <command>' for a command's flags.\n", prog)
}

// NewLogger returns a binary's logger: JSON lines with RFC 3339
// timestamps to the millisecond in UTC, or console output with pretty.
func NewLogger(w io.Writer, pretty bool, level zerolog.Level) zerolog.Logger {
	if pretty {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).Hook(timestamp{})
}

// timestamp adds the time to each event in RFC 3339 with milliseconds,
// UTC: zerolog's own Timestamp has whole seconds unless its package-level
// format is changed, which a library must not rely on.
type timestamp struct{}

// TimeFormat is the format of the time field of log lines.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

func (timestamp) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().UTC().Format(TimeFormat))
}
