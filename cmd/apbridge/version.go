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

// What a release build stamps into the binary (make release):
//
//	-ldflags "-X main.version=1.2.0 -X main.commit=<sha> -X main.buildDate=<RFC 3339> -X main.modified=true"
//
// They are set by the linker and never written at run time. A build
// without them (go build, go install) falls back on what the Go
// toolchain records: the module version and the VCS revision and commit
// time (runtime/debug.ReadBuildInfo).
var (
	version   string // semantic version, without "v"
	commit    string // the full VCS revision
	buildDate string // when the binary was built, RFC 3339
	modified  string // "true" when the tree had uncommitted changes
)

// buildInfo is what the binary knows of its build: its version, VCS
// revision, date and whether the tree had changes.
type buildInfo struct {
	Version  string // semantic version, without "v"
	Revision string
	// Time is the build date when stamped, else the commit's time.
	Time     string
	Modified bool
	Go       string
}

var semver = regexp.MustCompile(`^v?(\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?)$`)

func readBuildInfo() buildInfo {
	b := buildInfo{Version: bridge.Version, Go: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
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
	}
	return b.stamped(version, commit, buildDate, modified)
}

// stamped is b with what the linker stamped in (any that is set): the
// stamp describes the release build, the toolchain's record only the
// checkout it was built from.
func (b buildInfo) stamped(version, commit, date, modified string) buildInfo {
	if m := semver.FindStringSubmatch(version); m != nil {
		b.Version = m[1]
	}
	if commit != "" {
		b.Revision, b.Modified = commit, modified == "true"
	}
	if date != "" {
		b.Time = date
	}
	return b
}

// metadata is the build for the micro service's metadata: revision,
// build_date and go, those that are known.
func (b buildInfo) metadata() map[string]string {
	md := map[string]string{"go": b.Go}
	if b.Revision != "" {
		md["revision"] = b.Revision
		if b.Modified {
			md["revision"] += "-modified"
		}
	}
	if b.Time != "" {
		md["build_date"] = b.Time
	}
	return md
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
