package uaclient

import (
	"strings"
	"testing"
)

// A node ID by namespace URI resolves on each server against its own
// NamespaceArray; one by index is the same on both.
func TestNodeIDResolve(t *testing.T) {
	nsA := []string{"http://opcfoundation.org/UA/", "urn:server-a", "urn:plant"}
	nsB := []string{"http://opcfoundation.org/UA/", "urn:plant", "urn:server-b"}
	for _, tc := range []struct {
		in, onA, onB, err string
	}{
		{in: "nsu=urn:plant;s=Line1.Temp", onA: "ns=2;s=Line1.Temp", onB: "ns=1;s=Line1.Temp"},
		{in: "nsu=urn:plant;i=42", onA: "ns=2;i=42", onB: "ns=1;i=42"},
		{in: "nsu=urn:server-a;s=X", onA: "ns=1;s=X", err: `namespace "urn:server-a" is not in the server's NamespaceArray`},
		{in: "ns=3;s=X", onA: "ns=3;s=X", onB: "ns=3;s=X"},
		{in: "i=2258", onA: "i=2258", onB: "i=2258"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			n, err := ParseNodeID(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			a, err := n.Resolve(nsA)
			if err != nil || a.String() != tc.onA {
				t.Fatalf("on A: %v %v, want %s", a, err, tc.onA)
			}
			b, err := n.Resolve(nsB)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("on B: %v, want %q", err, tc.err)
				}
			case err != nil || b.String() != tc.onB:
				t.Fatalf("on B: %v %v, want %s", b, err, tc.onB)
			}
		})
	}
}

// What is not a node ID in its string form is refused, with a message
// that shows the form; gopcua's panics are errors.
func TestParseNodeIDRefuses(t *testing.T) {
	for _, bad := range []string{"", "nsu=;s=X", "nsu=urn:plant", "nsu=urn:plant;q=1", "Line1.Temp", "ns=x;s=A", "i=-1", "s=", "g=nope"} {
		if n, err := ParseNodeID(bad); err == nil {
			t.Errorf("%q accepted as %v", bad, n)
		}
	}
	_, err := ParseNodeID("Line1.Temp")
	if err == nil || !strings.Contains(err.Error(), "ns=2;s=Line1.Temp") {
		t.Errorf("a name without a type prefix: %v, want the form shown", err)
	}
}

// CheckNodeID, which a config check calls for every tag, refuses what
// ParseNodeID refuses, with the same message, and accepts the rest.
func TestCheckNodeIDAgrees(t *testing.T) {
	for _, s := range []string{"", "nsu=;s=X", "nsu=urn:plant", "nsu=urn:plant;q=1", "Line1.Temp", "ns=x;s=A", "i=-1", "s=", "g=nope",
		"nsu=urn:plant;s=Line1.Temp", "ns=3;s=X", "i=2258", "s=a;b", "b=", "ns=1;b=AAE=", "ns=3;g=72962B91-FA75-4AE6-8D28-B404DC7DAF63"} {
		_, perr := ParseNodeID(s)
		cerr := CheckNodeID(s)
		if (perr == nil) != (cerr == nil) || perr != nil && perr.Error() != cerr.Error() {
			t.Errorf("%q: ParseNodeID %v, CheckNodeID %v", s, perr, cerr)
		}
	}
}
