package opcuasource

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// BrowseRoot expands to the Variables below an OPC UA node.
type BrowseRoot struct {
	// Node is the node ID to start from, e.g. "ns=1;s=Line1" or "i=85"
	// (the Objects folder).
	Node string `yaml:"node" json:"node"`
	// Prefix is put in front of every tag name found; default none. A tag
	// is named by the browse names on its path below Node, joined by '.'.
	Prefix string `yaml:"prefix,omitempty" json:"prefix,omitempty"`
	// MaxDepth bounds the levels followed below Node (default 10).
	MaxDepth int `yaml:"maxDepth,omitempty" json:"maxDepth,omitempty"`
	// Writable marks every tag found as writable.
	Writable bool `yaml:"writable,omitempty" json:"writable,omitempty"`
	// Include and Exclude are glob patterns (path.Match: *, ?, [...]) on
	// the tag name below the root, before Prefix: a Variable becomes a tag
	// when it matches an Include pattern (or there are none) and no Exclude
	// pattern. '*' does not cross the '.' between browse names.
	Include []string `yaml:"include,omitempty" json:"include,omitempty"`
	Exclude []string `yaml:"exclude,omitempty" json:"exclude,omitempty"`
	// MaxNodes caps the tags this root may yield (default 10000); a root
	// that finds more is an error, not a silent cut.
	MaxNodes int `yaml:"maxNodes,omitempty" json:"maxNodes,omitempty"`
}

// defaultMaxNodes is a browse root's cap on the tags it yields when its
// MaxNodes is 0.
const defaultMaxNodes = 10000

// Validate checks the root's fields, each error prefixed with field.
func (r BrowseRoot) Validate(field string) error {
	var errs []error
	if err := ValidateNodeID(r.Node); err != nil {
		errs = append(errs, fmt.Errorf("%s.node: %q is not a node ID: %v", field, r.Node, err))
	}
	if r.MaxDepth < 0 || r.MaxDepth > 100 {
		errs = append(errs, fmt.Errorf("%s.maxDepth: %d is out of range (valid 0-100; 0 means 10)", field, r.MaxDepth))
	}
	if r.MaxNodes < 0 || r.MaxNodes > maxBrowseTags {
		errs = append(errs, fmt.Errorf("%s.maxNodes: %d is out of range (valid 0-%d; 0 means %d)", field, r.MaxNodes, maxBrowseTags, defaultMaxNodes))
	}
	for kind, pats := range map[string][]string{"include": r.Include, "exclude": r.Exclude} {
		for i, p := range pats {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				errs = append(errs, fmt.Errorf("%s.%s[%d]: %q is not a glob pattern (path.Match: *, ?, [...])", field, kind, i, p))
			}
		}
	}
	return errors.Join(errs...)
}

// wants reports whether a Variable named name (below the root) becomes a
// tag.
func (r BrowseRoot) wants(name string) bool {
	for _, p := range r.Exclude {
		if ok, _ := path.Match(p, name); ok {
			return false
		}
	}
	if len(r.Include) == 0 {
		return true
	}
	for _, p := range r.Include {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// maxBrowseTags stops a browse that would never end (a reference loop the
// visited set does not catch, a server that invents children).
const maxBrowseTags = 200000

// BrowseTags connects a short-lived client to endpoint and returns a tag
// for every Variable below each root, following hierarchical references.
// Nodes reached twice are listed once.
// Tags outside namespace 0 are addressed by namespace URI (nsu=), which
// holds on either server of a pair; namespaces is the server's
// NamespaceArray, for ByNamespaceURI.
//
// warn, if not nil, is told of a root whose include patterns match nothing.
func BrowseTags(ctx context.Context, endpoint string, roots []BrowseRoot, warn func(string), opts ...opcua.Option) (tags []bridge.TagConfig, namespaces []string, err error) {
	if warn == nil {
		warn = func(string) {}
	}
	c, err := opcua.NewClient(endpoint, append([]opcua.Option{opcua.AutoReconnect(false)}, opts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("browse %s: %w", endpoint, err)
	}
	if err := c.Connect(ctx); err != nil {
		return nil, nil, fmt.Errorf("browse %s: connect: %w", endpoint, err)
	}
	defer c.Close(context.Background())
	ns, err := c.NamespaceArray(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("browse %s: read the NamespaceArray: %w", endpoint, err)
	}
	seen := map[string]bool{}
	for i, r := range roots {
		id, err := uaclient.ParseNodeID(r.Node)
		var root *ua.NodeID
		if err == nil {
			root, err = id.Resolve(ns)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("browse[%d].node: %q: %v", i, r.Node, err)
		}
		depth := r.MaxDepth
		if depth <= 0 {
			depth = 10
		}
		limit := r.MaxNodes
		if limit <= 0 {
			limit = defaultMaxNodes
		}
		found, variables := 0, 0
		err = browse(ctx, c, root, nil, depth, func(path []string, nid *ua.NodeID) error {
			key := nid.String()
			if seen[key] {
				return nil
			}
			seen[key] = true
			variables++
			rel := strings.Join(path, ".")
			if !r.wants(rel) {
				return nil
			}
			if found++; found > limit {
				return fmt.Errorf("more than maxNodes (%d) variables below %s: raise maxNodes or narrow include", limit, r.Node)
			}
			// By namespace URI: the other server of a pair may number
			// its namespaces differently.
			key = ByNamespaceURI(key, ns)
			name := rel
			if r.Prefix != "" {
				name = r.Prefix + "." + name
			}
			tags = append(tags, bridge.TagConfig{Name: name, Address: key, Writable: r.Writable})
			if len(tags) > maxBrowseTags {
				return fmt.Errorf("more than %d variables", maxBrowseTags)
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("browse %s below %s: %w", endpoint, r.Node, err)
		}
		if found == 0 && variables > 0 {
			warn(fmt.Sprintf("browse[%d]: none of the %d variables below %s matches include %q (exclude %q)",
				i, variables, r.Node, r.Include, r.Exclude))
		}
	}
	return tags, ns, nil
}

// ByNamespaceURI returns a node ID in string form with its namespace index
// (ns=<n>) replaced by that namespace's URI from namespaces (nsu=<uri>);
// a node ID in namespace 0, one already by URI, or one whose index the
// array lacks is returned as it is.
func ByNamespaceURI(nodeID string, namespaces []string) string {
	rest, ok := strings.CutPrefix(nodeID, "ns=")
	if !ok {
		return nodeID
	}
	idx, id, ok := strings.Cut(rest, ";")
	n, err := strconv.Atoi(idx)
	if !ok || err != nil || n <= 0 || n >= len(namespaces) {
		return nodeID
	}
	return "nsu=" + namespaces[n] + ";" + id
}

func browse(ctx context.Context, c *opcua.Client, node *ua.NodeID, path []string, depth int, found func([]string, *ua.NodeID) error) error {
	if depth < 0 {
		return nil
	}
	refs, err := references(ctx, c, node)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if ref.NodeID == nil || ref.NodeID.NodeID == nil {
			continue
		}
		name := ref.BrowseName.Name
		if ref.DisplayName != nil && name == "" {
			name = ref.DisplayName.Text
		}
		p := append(append([]string(nil), path...), name)
		switch ref.NodeClass {
		case ua.NodeClassVariable:
			if err := found(p, ref.NodeID.NodeID); err != nil {
				return err
			}
		case ua.NodeClassObject:
			if err := browse(ctx, c, ref.NodeID.NodeID, p, depth-1, found); err != nil {
				return err
			}
		}
	}
	return nil
}

// references lists node's forward hierarchical references to Objects and
// Variables, following continuation points.
func references(ctx context.Context, c *opcua.Client, node *ua.NodeID) ([]*ua.ReferenceDescription, error) {
	resp, err := c.Browse(ctx, &ua.BrowseRequest{
		NodesToBrowse: []*ua.BrowseDescription{{
			NodeID:          node,
			BrowseDirection: ua.BrowseDirectionForward,
			ReferenceTypeID: ua.NewNumericNodeID(0, id.HierarchicalReferences),
			IncludeSubtypes: true,
			NodeClassMask:   uint32(ua.NodeClassObject | ua.NodeClassVariable),
			ResultMask:      uint32(ua.BrowseResultMaskAll),
		}},
		RequestedMaxReferencesPerNode: 1000,
	})
	if err != nil {
		return nil, err
	}
	if len(resp.Results) == 0 {
		return nil, errors.New("empty browse result")
	}
	res := resp.Results[0]
	if res.StatusCode != ua.StatusOK {
		return nil, fmt.Errorf("browse %s: %v", node, res.StatusCode)
	}
	refs := res.References
	cp := res.ContinuationPoint
	for len(cp) > 0 {
		next, err := c.BrowseNext(ctx, &ua.BrowseNextRequest{ContinuationPoints: [][]byte{cp}})
		if err != nil {
			return nil, err
		}
		if len(next.Results) == 0 || next.Results[0].StatusCode != ua.StatusOK {
			break
		}
		refs = append(refs, next.Results[0].References...)
		cp = next.Results[0].ContinuationPoint
	}
	return refs, nil
}
