package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/internal/cli"
)

// buildInfo is what the binary knows of its build: the module version
// (bridge.Version for a build from a checkout), the VCS revision and
// whether the tree had changes.
type buildInfo struct {
	Version  string // semantic version, without "v"
	Revision string
	Time     string
	Modified bool
	Go       string
}

var semver = regexp.MustCompile(`^v?(\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?)$`)

func readBuildInfo() buildInfo {
	b := buildInfo{Version: bridge.Version, Go: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if m := semver.FindStringSubmatch(info.Main.Version); m != nil {
		b.Version = m[1]
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the version line: "apbridge 0.1.0 (revision 1a2b3c4d5e6f, 2026-12-01T10:00:00Z, modified) go1.25.0".
func (b buildInfo) String() string {
	var extra []string
	if b.Revision != "" {
		r := b.Revision
		if len(r) > 12 {
			r = r[:12]
		}
		extra = append(extra, "revision "+r)
	}
	if b.Time != "" {
		extra = append(extra, b.Time)
	}
	if b.Modified {
		extra = append(extra, "modified")
	}
	s := "apbridge " + b.Version
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s + " " + b.Go
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	_, err := fmt.Fprintln(stdout, readBuildInfo())
	return err
}
