package opcuasource

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apbridge/apbridge/bridge"
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
}

// maxBrowseTags stops a browse that would never end (a reference loop the
// visited set does not catch, a server that invents children).
const maxBrowseTags = 200000

// BrowseTags connects a short-lived client to endpoint and returns a tag
// for every Variable below each root, following hierarchical references.
// Nodes reached twice are listed once.
func BrowseTags(ctx context.Context, endpoint string, roots []BrowseRoot, opts ...opcua.Option) ([]bridge.TagConfig, error) {
	c, err := opcua.NewClient(endpoint, append([]opcua.Option{opcua.AutoReconnect(false)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("browse %s: %w", endpoint, err)
	}
	if err := c.Connect(ctx); err != nil {
		return nil, fmt.Errorf("browse %s: connect: %w", endpoint, err)
	}
	defer c.Close(context.Background())
	ns, err := c.NamespaceArray(ctx)
	if err != nil {
		return nil, fmt.Errorf("browse %s: read the NamespaceArray: %w", endpoint, err)
	}
	var tags []bridge.TagConfig
	seen := map[string]bool{}
	for i, r := range roots {
		root, err := parseNode(r.Node, ns)
		if err != nil {
			return nil, fmt.Errorf("browse[%d].node: %q: %v", i, r.Node, err)
		}
		depth := r.MaxDepth
		if depth <= 0 {
			depth = 10
		}
		err = browse(ctx, c, root, nil, depth, func(path []string, nid *ua.NodeID) error {
			key := nid.String()
			if seen[key] {
				return nil
			}
			seen[key] = true
			// By namespace URI: the other server of a pair may number
			// its namespaces differently.
			if n := int(nid.Namespace()); n > 0 && n < len(ns) {
				key = "nsu=" + ns[n] + ";" + strings.SplitN(key, ";", 2)[1]
			}
			name := strings.Join(path, ".")
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
			return nil, fmt.Errorf("browse %s below %s: %w", endpoint, r.Node, err)
		}
	}
	return tags, nil
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

// parseNode parses a node ID in string form, resolving nsu=<uri> against
// the server's namespace array ns.
func parseNode(s string, ns []string) (*ua.NodeID, error) {
	if strings.HasPrefix(s, "nsu=") {
		e, err := ua.ParseExpandedNodeID(s, ns)
		if err != nil {
			return nil, err
		}
		return e.NodeID, nil
	}
	return ua.ParseNodeID(s)
}
