package uaclient

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gopcua/opcua/ua"
)

// NodeID is a node ID as a Pair's items, its writes and a relay's
// configuration give it: an OPC UA node ID in its string form
// ([ns=<index>;]<i|s|g|b>=<identifier>, namespace 0 when the index is left
// out), or one by namespace URI (nsu=<uri>;<i|s|g|b>=<identifier>), which
// each server resolves against its own NamespaceArray: the two servers of
// a pair may number their namespaces differently.
type NodeID struct {
	node  *ua.NodeID // nil for one by namespace URI
	nsURI string     // the namespace URI of one by namespace URI
	text  string     // the node ID in string form
}

// ParseNodeID parses s. Its errors say what the string form is. It refuses
// what has no type prefix: gopcua would read "Line1.Temp" as a string
// identifier in namespace 0, and a configuration that says it more likely
// forgot "ns=2;s=". It never panics, as gopcua's parser may.
func ParseNodeID(s string) (NodeID, error) { return parseNodeID(s, true) }

// CheckNodeID returns the error ParseNodeID returns for s, or nil,
// without working out the node ID's text: a config check calls it for
// every tag, and a config has thousands.
func CheckNodeID(s string) error {
	_, err := parseNodeID(s, false)
	return err
}

// parseNodeID is ParseNodeID; text works out the form String returns,
// which no error depends on.
func parseNodeID(s string, text bool) (NodeID, error) {
	if s == "" {
		return NodeID{}, errors.New("empty node ID")
	}
	if !nodeIDForm.MatchString(s) {
		return NodeID{}, errors.New("want the string form [ns=<index>;]<i|s|g|b>=<identifier>, e.g. ns=2;s=Line1.Temp, or nsu=<namespace URI>;<identifier>")
	}
	if uri, id, ok := splitNSU(s); ok {
		// The identifier must parse in some namespace.
		if _, err := parseUANodeID("ns=1;" + id); err != nil {
			return NodeID{}, err
		}
		return NodeID{nsURI: uri, text: s}, nil
	}
	n, err := parseUANodeID(s)
	switch {
	case err != nil:
		return NodeID{}, err
	case !text:
		return NodeID{node: n, text: s}, nil
	}
	form := n.String()
	if _, err := parseUANodeID(form); err != nil || !nodeIDForm.MatchString(form) {
		// gopcua prints some node IDs in a form it cannot read back
		// (a string identifier with a ';' in namespace 0 as "s=a;b", an
		// empty ByteString as "b="): keep the form given.
		form = s
	}
	return NodeID{node: n, text: form}, nil
}

// nodeIDForm is the string form of a node ID: a namespace index or URI,
// then the identifier with its type.
var nodeIDForm = regexp.MustCompile(`^(ns=\d+;|nsu=[^;]+;)?(i=\d+|s=.+|g=[0-9A-Fa-f-]{36}|b=.+)$`)

// String returns the node ID in string form, one ParseNodeID reads back:
// gopcua's canonical form for a node ID by index where it reads back.
func (n NodeID) String() string { return n.text }

// NamespaceURI returns the namespace URI of a node ID by URI, and "" for
// one by index.
func (n NodeID) NamespaceURI() string { return n.nsURI }

// Resolve returns the node ID on a server whose NamespaceArray is ns.
func (n NodeID) Resolve(ns []string) (*ua.NodeID, error) {
	if n.node != nil {
		return n.node, nil
	}
	_, id, _ := splitNSU(n.text)
	i := slices.Index(ns, n.nsURI)
	if i < 0 {
		return nil, fmt.Errorf("namespace %q is not in the server's NamespaceArray", n.nsURI)
	}
	return parseUANodeID(fmt.Sprintf("ns=%d;%s", i, id))
}

// splitNSU splits nsu=<uri>;<identifier>.
func splitNSU(s string) (uri, id string, ok bool) {
	rest, ok := strings.CutPrefix(s, "nsu=")
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, ";")
}

// parseUANodeID is ua.ParseNodeID, which must never take a relay down.
func parseUANodeID(s string) (n *ua.NodeID, err error) {
	defer func() {
		if r := recover(); r != nil {
			n, err = nil, fmt.Errorf("unparsable: %v", r)
		}
	}()
	return ua.ParseNodeID(s)
}
