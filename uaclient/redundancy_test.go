package uaclient

import (
	"slices"
	"strings"
	"testing"

	"github.com/gopcua/opcua/ua"
)

// TestJudgeServers: the rules of the check of a pair, one case each; the
// real-server tests (redundancy_pair_test.go) show the Pair acting on them.
func TestJudgeServers(t *testing.T) {
	urls := [2]string{"opc.tcp://a:4840", "opc.tcp://b:4840"}
	warm := func(uri string, set ...string) ServerInfo {
		return ServerInfo{ApplicationURI: uri, Redundancy: ua.RedundancySupportWarm, RedundancyKnown: true, ServerURIs: set}
	}
	none := func(uri string) ServerInfo {
		return ServerInfo{ApplicationURI: uri, Redundancy: ua.RedundancySupportNone, RedundancyKnown: true}
	}
	both := [2]bool{true, true}
	for _, tc := range []struct {
		name     string
		info     [2]ServerInfo
		known    [2]bool
		same     bool
		warnings []string // a part of each warning, in order
	}{
		{"a redundant set", [2]ServerInfo{warm("urn:a", "urn:a", "urn:b"), warm("urn:b", "urn:b", "urn:a")}, both, false, nil},
		{"one server twice", [2]ServerInfo{warm("urn:a", "urn:a", "urn:b"), warm("urn:a", "urn:a", "urn:b")}, both, true, nil},
		// The error says it all: a None server is not warned of as well.
		{"one server twice, no redundancy", [2]ServerInfo{none("urn:a"), none("urn:a")}, both, true, nil},
		{"primary None", [2]ServerInfo{none("urn:a"), warm("urn:b", "urn:a", "urn:b")}, both, false,
			[]string{"the primary (opc.tcp://a:4840) reports RedundancySupport None"}},
		{"both None", [2]ServerInfo{none("urn:a"), none("urn:b")}, both, false,
			[]string{"the primary (opc.tcp://a:4840) reports RedundancySupport None", "the backup (opc.tcp://b:4840) reports RedundancySupport None"}},
		{"None known before the other server", [2]ServerInfo{{}, none("urn:b")}, [2]bool{false, true}, false,
			[]string{"the backup (opc.tcp://b:4840) reports RedundancySupport None"}},
		{"sets that do not name each other", [2]ServerInfo{warm("urn:a", "urn:a", "urn:x"), warm("urn:b", "urn:b", "urn:y")}, both, false,
			[]string{"the primary (opc.tcp://a:4840) lists its redundant set as [urn:a, urn:x] (ServerUriArray), without backup's ApplicationUri urn:b",
				"the backup (opc.tcp://b:4840) lists its redundant set as [urn:b, urn:y] (ServerUriArray), without primary's ApplicationUri urn:a"}},
		{"one set leaves the other out", [2]ServerInfo{warm("urn:a", "urn:a"), warm("urn:b", "urn:a", "urn:b")}, both, false,
			[]string{"the primary (opc.tcp://a:4840) lists its redundant set as [urn:a]"}},
		// An empty or absent list says nothing, nor does an unknown URI.
		{"no lists", [2]ServerInfo{warm("urn:a"), warm("urn:b", []string{}...)}, both, false, nil},
		{"the peer's URI unknown", [2]ServerInfo{warm("urn:a", "urn:a"), warm("")}, both, false, nil},
		{"no URIs at all", [2]ServerInfo{{}, {}}, both, false, nil},
		{"one server known", [2]ServerInfo{warm("urn:a", "urn:a"), {}}, [2]bool{true, false}, false, nil},
		{"unreadable RedundancySupport", [2]ServerInfo{{ApplicationURI: "urn:a"}, {ApplicationURI: "urn:b"}}, both, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, about := judgeServers(tc.info, tc.known, urls)
			if rc.SameServer != tc.same || (rc.Problem != "") != tc.same {
				t.Fatalf("SameServer %v (%q), want %v", rc.SameServer, rc.Problem, tc.same)
			}
			if tc.same && !strings.Contains(rc.Problem, "report one ApplicationUri, urn:a: both endpoints reach the same server") {
				t.Errorf("problem %q", rc.Problem)
			}
			if len(rc.Warnings) != len(tc.warnings) {
				t.Fatalf("warnings %q, want %d", rc.Warnings, len(tc.warnings))
			}
			for i, w := range tc.warnings {
				if !strings.Contains(rc.Warnings[i], w) {
					t.Errorf("warning %d %q does not say %q", i, rc.Warnings[i], w)
				}
				// Each is about the server it names first.
				if !strings.HasPrefix(rc.Warnings[i], "the "+about[i].String()+" (") {
					t.Errorf("warning %d %q is said to be about the %s", i, rc.Warnings[i], about[i])
				}
			}
		})
	}
	transparent := ServerInfo{ApplicationURI: "urn:t", Redundancy: ua.RedundancySupportTransparent, RedundancyKnown: true}
	if rc, _ := judgeServers([2]ServerInfo{transparent, transparent}, both, urls); !strings.Contains(rc.Problem, "Transparent redundancy") {
		t.Errorf("a transparent set on both endpoints: %q does not say what it is", rc.Problem)
	}
}

// TestServerInfoOf: what the connect's Read gives, and what a server that
// lacks a node gives (the field stays unknown; the session is not
// refused for it).
func TestServerInfoOf(t *testing.T) {
	good := func(v any) *ua.DataValue { return &ua.DataValue{Value: ua.MustVariant(v), Status: ua.StatusOK} }
	bad := &ua.DataValue{Status: ua.StatusBadNodeIDUnknown}
	info := serverInfoOf([]*ua.DataValue{good([]string{"urn:a", "urn:b"}), good(int32(2)), good([]string{"urn:a", "urn:b"})})
	if info.ApplicationURI != "urn:a" || !info.RedundancyKnown || info.Redundancy != ua.RedundancySupportWarm ||
		!slices.Equal(info.ServerURIs, []string{"urn:a", "urn:b"}) {
		t.Errorf("%+v", info)
	}
	info = serverInfoOf([]*ua.DataValue{bad, bad, bad})
	if info.ApplicationURI != "" || info.RedundancyKnown || info.ServerURIs != nil {
		t.Errorf("from Bad results: %+v", info)
	}
	info = serverInfoOf([]*ua.DataValue{good([]string{}), good(int32(0)), nil})
	if info.ApplicationURI != "" || !info.RedundancyKnown || info.Redundancy != ua.RedundancySupportNone || info.ServerURIs != nil {
		t.Errorf("an empty ServerArray, None, no ServerUriArray: %+v", info)
	}
	if info := serverInfoOf(nil); info.ApplicationURI != "" || info.RedundancyKnown {
		t.Errorf("a single server's read: %+v", info)
	}
}
