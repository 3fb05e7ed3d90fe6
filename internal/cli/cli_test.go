package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestRun(t *testing.T) {
	cmds := []Command{
		{Name: "ok", Summary: "succeeds", Run: func(context.Context, []string, io.Writer, io.Writer) error { return nil }},
		{Name: "fail", Summary: "fails", Run: func(context.Context, []string, io.Writer, io.Writer) error { return errors.New("broken") }},
		{Name: "exit", Summary: "exits 3", Run: func(context.Context, []string, io.Writer, io.Writer) error { return ExitError{Code: 3} }},
		{Name: "help", Summary: "asks for help", Run: func(context.Context, []string, io.Writer, io.Writer) error { return flag.ErrHelp }},
		{Name: "child", Summary: "hidden", Hidden: true, Run: func(context.Context, []string, io.Writer, io.Writer) error { return nil }},
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, 2, "usage: prog <command>"},
		{[]string{"--help"}, 0, ""},
		{[]string{"ok"}, 0, ""},
		{[]string{"fail"}, 1, "prog fail: broken"},
		{[]string{"exit"}, 3, ""},
		{[]string{"child"}, 0, ""},
		{[]string{"nope"}, 2, `prog: unknown command "nope"`},
	} {
		var stderr strings.Builder
		if code := Run("prog", cmds, tc.args, io.Discard, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.stderr)
		}
		if strings.Contains(stderr.String(), "hidden") {
			t.Errorf("%v: the usage lists a hidden command", tc.args)
		}
	}
}

func TestUsageAndHelp(t *testing.T) {
	var seen []string
	cmds := []Command{
		{Name: "cmd", Summary: "takes -n", Run: func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
			n := fs.Int("n", 1, "a number")
			if err := Parse(fs, args, stdout, stderr); err != nil {
				return err
			}
			if *n < 1 {
				return Usagef("-n: %d is out of range (valid 1 or more)", *n)
			}
			return nil
		}},
		{Name: "version", Summary: "prints the version", Run: func(_ context.Context, args []string, stdout, _ io.Writer) error {
			seen = append(seen, "version")
			_, err := io.WriteString(stdout, "v1\n")
			return err
		}},
	}
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"cmd", "-n", "2"}, 0, "", ""},
		{[]string{"cmd", "extra"}, 2, "", `cmd: unexpected argument "extra"`},
		{[]string{"cmd", "-n", "x"}, 2, "", `invalid value "x" for flag -n`},
		{[]string{"cmd", "-n", "0"}, 2, "", "prog cmd: -n: 0 is out of range"},
		{[]string{"cmd", "-h"}, 0, "-n int", ""},
		{[]string{"help", "cmd"}, 0, "-n int", ""},
		{[]string{"help"}, 0, "usage: prog <command>", ""},
		{[]string{"--version"}, 0, "v1", ""},
		{[]string{"version"}, 0, "v1", ""},
	} {
		var stdout, stderr strings.Builder
		code := Run("prog", cmds, tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
		}
		if tc.code == 0 && stderr.Len() > 0 {
			t.Errorf("%v: stderr %q on success", tc.args, stderr.String())
		}
	}
	if len(seen) != 2 {
		t.Errorf("version ran %d times, want 2", len(seen))
	}
}

func TestLoggerTimestamp(t *testing.T) {
	var b strings.Builder
	log := NewLogger(&b, false, zerolog.InfoLevel)
	log.Info().Msg("x")
	var line struct{ Time string }
	if err := json.Unmarshal([]byte(b.String()), &line); err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339Nano, line.Time); err != nil || len(line.Time) != len("2006-01-02T15:04:05.000Z") {
		t.Fatalf("time %q: %v (want RFC 3339 with milliseconds, UTC)", line.Time, err)
	}
	if strings.Count(b.String(), `"time"`) != 1 {
		t.Fatalf("line %s", b.String())
	}
}
