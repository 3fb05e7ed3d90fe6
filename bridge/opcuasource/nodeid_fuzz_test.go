package opcuasource_test

import (
	"strings"
	"testing"

	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/gopcua/opcua/ua"
)

// FuzzValidateNodeID: any text is accepted or refused without a panic;
// what is accepted is a node ID gopcua parses, and (outside the nsu= form,
// which needs a server's namespace table) one that prints and parses back
// to itself.
func FuzzValidateNodeID(f *testing.F) {
	for _, s := range []string{"ns=2;s=Line1.Temp", "i=2258", "ns=3;g=72962B91-FA75-4AE6-8D28-B404DC7DAF63", "ns=1;b=AAE=",
		"nsu=urn:x;s=A", "Line1.Temp", "ns=;s=", "ns=99999999999;i=1", "i=-1", "s=", "b=!!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if opcuasource.ValidateNodeID(s) != nil {
			return
		}
		n, err := ua.ParseNodeID(s)
		if err != nil {
			t.Fatalf("ValidateNodeID(%q) accepted what gopcua refuses: %v", s, err)
		}
		if strings.HasPrefix(s, "nsu=") {
			return
		}
		back, err := ua.ParseNodeID(n.String())
		if err != nil || back.String() != n.String() {
			t.Fatalf("%q: prints as %q, which parses to %v (%v)", s, n.String(), back, err)
		}
	})
}
