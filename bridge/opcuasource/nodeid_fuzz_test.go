package opcuasource_test

import (
	"testing"

	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/uaclient"
)

// FuzzValidateNodeID: any text is accepted or refused without a panic;
// what is accepted resolves to a node ID (in the nsu= form, against a
// server's namespace table), and prints in a form that parses back to the
// same node ID.
func FuzzValidateNodeID(f *testing.F) {
	for _, s := range []string{"ns=2;s=Line1.Temp", "i=2258", "ns=3;g=72962B91-FA75-4AE6-8D28-B404DC7DAF63", "ns=1;b=AAE=",
		"nsu=urn:x;s=A", "Line1.Temp", "ns=;s=", "ns=99999999999;i=1", "i=-1", "s=", "b=!!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if opcuasource.ValidateNodeID(s) != nil {
			return
		}
		id, err := uaclient.ParseNodeID(s)
		if err != nil {
			t.Fatalf("ValidateNodeID(%q) accepted what ParseNodeID refuses: %v", s, err)
		}
		n, err := id.Resolve([]string{"http://opcfoundation.org/UA/", id.NamespaceURI()})
		if err != nil {
			t.Fatalf("%q: accepted, but it does not resolve: %v", s, err)
		}
		back, err := uaclient.ParseNodeID(id.String())
		if err != nil || back.String() != id.String() {
			t.Fatalf("%q: prints as %q, which parses to %v (%v)", s, id.String(), back, err)
		}
		if again, err := back.Resolve([]string{"http://opcfoundation.org/UA/", back.NamespaceURI()}); err != nil || !again.Equal(n) {
			t.Fatalf("%q: prints as %q, which resolves to %v (%v), not %v", s, id.String(), again, err, n)
		}
	})
}
