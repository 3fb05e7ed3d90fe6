package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// What make release stamps wins over the toolchain's record; a build
// without a stamp keeps the record.
func TestBuildInfoStamped(t *testing.T) {
	vcs := buildInfo{Version: "0.1.0", Revision: "1111111111111111", Time: "2026-01-01T00:00:00Z", Modified: true, Go: "go1.26.0"}
	if got := vcs.stamped("", "", "", ""); got != vcs {
		t.Errorf("no stamp: %+v", got)
	}
	got := vcs.stamped("v1.2.0-3-gabc1234-dirty", "abcdef0123456789abcdef", "2026-12-01T10:00:00Z", "")
	want := buildInfo{Version: "1.2.0-3-gabc1234-dirty", Revision: "abcdef0123456789abcdef", Time: "2026-12-01T10:00:00Z", Go: "go1.26.0"}
	if got != want {
		t.Errorf("stamped: %+v\nwant %+v", got, want)
	}
	if s := got.String(); s != "apbridge 1.2.0-3-gabc1234-dirty (revision abcdef012345, 2026-12-01T10:00:00Z) go1.26.0" {
		t.Errorf("version line %q", s)
	}
	if md := got.stamped("", "", "", "").metadata(); md["revision"] != "abcdef0123456789abcdef" || md["build_date"] != "2026-12-01T10:00:00Z" || md["go"] != "go1.26.0" {
		t.Errorf("metadata %v", md)
	}
	dirty := vcs.stamped("0.1.0-dev+gabcdef", "abcdef", "", "true")
	if !dirty.Modified || dirty.metadata()["revision"] != "abcdef-modified" || dirty.Version != "0.1.0-dev+gabcdef" {
		t.Errorf("modified stamp: %+v %v", dirty, dirty.metadata())
	}
	// Not a semantic version (the micro service requires one): ignored.
	if got := vcs.stamped("latest", "", "", ""); got.Version != "0.1.0" {
		t.Errorf("bad version stamped: %q", got.Version)
	}
}

// The Makefile stamps exactly the variables version.go declares.
func TestMakefileStampsVersionVars(t *testing.T) {
	_ = []*string{&version, &commit, &buildDate, &modified} // compile-time: they exist
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`-X main\.(\w+)=`).FindAllStringSubmatch(string(b), -1) {
		names = append(names, m[1])
	}
	slices.Sort(names)
	if got := strings.Join(slices.Compact(names), " "); got != "buildDate commit modified version" {
		t.Errorf("Makefile stamps %q", got)
	}
}
