package layout

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/apbridge/apbridge"

// deps returns every package pkg depends on, itself included, as go list
// -deps prints them.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", module+"/"+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// rule forbids pkg to depend on the packages that forbidden covers (see
// matches).
type rule struct {
	pkg       string
	forbidden []string
}

// rules returns the layout: cmd -> relay -> sources, sinks and the bridge
// core -> apconn -> ldm, with no technology in the core, no test server in
// library code or in the relay binary, and each test server on its own. A
// forbidden path without a trailing "/" covers the package and its
// subpackages, so module + "/testcluster" covers every package under it.
func rules() []rule {
	return []rule{
		{"ldm", []string{module + "/apconn", module + "/bridge", module + "/servicelevel", "github.com/nats-io/"}},
		{"apconn", []string{module + "/bridge", module + "/servicelevel", module + "/relay", module + "/testcluster"}},
		// The ServiceLevel vocabulary and the failover Policy are pure:
		// no OPC UA client, no NATS.
		{"servicelevel", []string{module + "/bridge", module + "/apconn", module + "/relay", module + "/testcluster",
			module + "/uaclient", "github.com/gopcua/", "github.com/nats-io/"}},
		// The OPC UA client knows nothing of NATS or of the relay.
		{"uaclient", []string{module + "/bridge", module + "/apconn", module + "/relay", module + "/testcluster",
			module + "/wire", "github.com/nats-io/"}},
		// The wire format is what consumers import: it links nothing of
		// the relay, of its sources or of the test servers.
		{"wire", []string{module + "/apconn", module + "/bridge", module + "/relay", module + "/servicelevel", module + "/uaclient",
			module + "/testcluster", "github.com/gopcua/", "google.golang.org/grpc"}},
		{"bridge", []string{"github.com/gopcua/", "github.com/nats-io/nats.go/jetstream", "github.com/nats-io/jsm.go",
			"google.golang.org/grpc", module + "/mxgateway",
			module + "/servicelevel", module + "/uaclient", module + "/bridge/", module + "/relay", module + "/testcluster"}},
		// What a source's author runs its source against links no test
		// server: the harness brings its own.
		{"bridge/sourcetest", []string{module + "/testcluster", "github.com/nats-io/nats-server/", "github.com/gopcua/"}},
		{"bridge/opcuasource", []string{module + "/bridge/jetstreamsink", module + "/relay", module + "/testcluster"}},
		// The gateway client knows nothing of the relay; the gateway source
		// nothing of OPC UA.
		{"mxgateway", []string{module + "/bridge", module + "/servicelevel", module + "/relay", module + "/testcluster", "github.com/nats-io/"}},
		{"bridge/mxsource", []string{"github.com/gopcua/", module + "/servicelevel", module + "/uaclient", module + "/bridge/opcuasource",
			module + "/bridge/jetstreamsink", module + "/relay", module + "/testcluster"}},
		{"bridge/jetstreamsink", []string{"github.com/gopcua/", module + "/bridge/opcuasource", module + "/relay", module + "/testcluster"}},
		// The fleet divides pairs among relays and knows nothing of what
		// a pair carries.
		{"fleet", []string{module + "/bridge", module + "/apconn", module + "/servicelevel", module + "/mxgateway",
			module + "/relay", module + "/testcluster", "github.com/gopcua/"}},
		{"relay", []string{module + "/testcluster", module + "/internal/nodeopcua", module + "/cmd/", "github.com/nats-io/nats-server/"}},
		// The binary a site runs links neither the embedded broker nor
		// the test OPC UA server.
		{"cmd/apbridge", []string{module + "/testcluster", module + "/internal/testutil", module + "/internal/nodeopcua",
			"github.com/nats-io/nats-server/"}},
		// The Windows service knows the service control manager, not the
		// relay it runs.
		{"internal/winservice", []string{module + "/relay", module + "/bridge", module + "/apconn", module + "/testcluster",
			"github.com/nats-io/"}},
		// Each test server is one product: none links another's, and the
		// simulated sources link no server.
		{"testcluster/faultproxy", []string{module + "/testcluster/natstest", module + "/testcluster/uaserver",
			module + "/testcluster/mxsim", module + "/testcluster/simsource", "github.com/nats-io/", "github.com/gopcua/"}},
		{"testcluster/natstest", []string{module + "/testcluster/uaserver", module + "/testcluster/mxsim",
			module + "/testcluster/simsource", "github.com/gopcua/", "google.golang.org/grpc"}},
		{"testcluster/uaserver", []string{module + "/testcluster/natstest", module + "/testcluster/mxsim",
			module + "/testcluster/simsource", "github.com/nats-io/", "google.golang.org/grpc"}},
		{"testcluster/mxsim", []string{module + "/testcluster/natstest", module + "/testcluster/uaserver",
			module + "/testcluster/faultproxy", module + "/testcluster/simsource", "github.com/nats-io/", "github.com/gopcua/"}},
		{"testcluster/simsource", []string{module + "/testcluster/natstest", module + "/testcluster/uaserver",
			module + "/testcluster/mxsim", module + "/testcluster/faultproxy", "github.com/nats-io/nats-server/",
			"github.com/gopcua/", "google.golang.org/grpc"}},
	}
}

// TestImportsPointOneWay checks that no package depends on what its rule
// forbids.
func TestImportsPointOneWay(t *testing.T) {
	for _, r := range rules() {
		for _, d := range deps(t, r.pkg) {
			for _, f := range r.forbidden {
				if matches(d, f) {
					t.Errorf("%s depends on %s, which it must not (rule: no %s)", r.pkg, d, f)
				}
			}
		}
	}
}

// TestRulesMatchSomething: every forbidden path covers at least one
// package that the module or its tests build, so that a rule naming a
// package that was moved or renamed fails here instead of silently
// forbidding nothing.
func TestRulesMatchSomething(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-test", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list -deps -test %s/...: %v", module, err)
	}
	all := strings.Fields(string(out))
	for _, r := range rules() {
		for _, f := range r.forbidden {
			if !slices.ContainsFunc(all, func(d string) bool { return matches(d, f) }) {
				t.Errorf("rule of %s: no package of the module or its dependencies falls under %s", r.pkg, f)
			}
		}
	}
}

// matches reports whether package d falls under rule f: f ending in "/"
// covers every package below it, any other f the package and its
// subpackages.
func matches(d, f string) bool {
	if strings.HasSuffix(f, "/") {
		return strings.HasPrefix(d, f)
	}
	return d == f || strings.HasPrefix(d, f+"/")
}
