package cli

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
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
		{[]string{"--help"}, 0, "  ok        succeeds"},
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
