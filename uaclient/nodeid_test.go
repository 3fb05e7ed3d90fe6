package uaclient

import (
	"strings"
	"testing"
)

func TestNamespaceURINodeIDs(t *testing.T) {
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
			n, uri, err := parseItemNode(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			spec := itemSpec{node: n, nsURI: uri, nodeStr: tc.in}
			a, err := spec.resolve(nsA)
			if err != nil || a.String() != tc.onA {
				t.Fatalf("on A: %v %v, want %s", a, err, tc.onA)
			}
			b, err := spec.resolve(nsB)
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
	for _, bad := range []string{"nsu=;s=X", "nsu=urn:plant", "nsu=urn:plant;q=1"} {
		if _, _, err := parseItemNode(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
