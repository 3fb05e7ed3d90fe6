package uaclient

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gopcua/opcua/ua"
)

// Item is a data item to monitor, keyed by its client handle.
type Item struct {
	// Handle is the client handle the item's updates carry. Handles are
	// the user's to choose and must be unique within a Pair.
	Handle uint32
	// NodeID is the node whose Value is monitored, in the OPC UA string
	// form, for example "ns=1;s=Counter0000" or "i=2258".
	NodeID string
	// SamplingInterval overrides the configured sampling interval when
	// positive.
	SamplingInterval time.Duration
	// QueueSize overrides the configured queue size when positive.
	QueueSize uint32
	// DiscardOldest, when set, overrides the configured discardOldest.
	DiscardOldest *bool
	// Filter, when set, overrides the configured data-change filter.
	Filter *DataChangeFilter
}

// ItemResult is the outcome of adding one Item.
type ItemResult struct {
	// Handle is the item's handle.
	Handle uint32
	// Err is nil when the item was added. Otherwise it names the item and
	// why: a bad node ID, a duplicate handle, or the server's rejection
	// (then Status holds the server's code). An item with an error was not
	// added.
	Err error
	// Status is the server's answer for the item, ua.StatusOK when it was
	// created. It is ua.StatusBadWaitingForInitialData when no session
	// carries the data right now: the item is added and will be created
	// (and appear in the snapshot) as soon as one does.
	Status ua.StatusCode
}

// itemRegistry holds the items a Pair monitors, by handle.
type itemRegistry map[uint32]*itemSpec

// register validates items with the Pair's settings for their defaults and
// adds them; it returns the results and the specs added.
func (reg itemRegistry) register(items []Item, set *PairSettings) ([]ItemResult, []*itemSpec) {
	results := make([]ItemResult, len(items))
	var added []*itemSpec
	for i, it := range items {
		r := &results[i]
		r.Handle = it.Handle
		spec, err := specOf(it, set)
		switch {
		case err != nil:
			r.Err, r.Status = err, ua.StatusBadNodeIDInvalid
		case reg[it.Handle] != nil:
			r.Err = fmt.Errorf("item %d (%s): handle already in use (by %s)", it.Handle, it.NodeID, reg[it.Handle].node)
			r.Status = ua.StatusBadInvalidArgument
		default:
			reg[it.Handle] = spec
			added = append(added, spec)
			r.Status = ua.StatusBadWaitingForInitialData
		}
	}
	return results, added
}

// unregister removes the items with handles; an unknown handle is an
// error.
func (reg itemRegistry) unregister(handles []uint32) []error {
	var errs []error
	for _, h := range handles {
		if reg[h] == nil {
			errs = append(errs, fmt.Errorf("item %d: %w", h, ErrUnknownHandle))
			continue
		}
		delete(reg, h)
	}
	return errs
}

// list returns the items in handle order.
func (reg itemRegistry) list() []itemSpec {
	out := make([]itemSpec, 0, len(reg))
	for _, it := range reg {
		out = append(out, *it)
	}
	slices.SortFunc(out, func(a, b itemSpec) int { return cmp.Compare(a.handle, b.handle) })
	return out
}

// nodeOf names the node of item h, for messages.
func (reg itemRegistry) nodeOf(h uint32) string {
	if it := reg[h]; it != nil {
		return it.node.String()
	}
	return "?"
}

// specOf is the item as the Pair monitors it: its own settings, or the
// Pair's.
func specOf(it Item, set *PairSettings) (*itemSpec, error) {
	s := strings.TrimSpace(it.NodeID)
	if s == "" {
		return nil, fmt.Errorf("item %d: node ID is empty", it.Handle)
	}
	node, err := ParseNodeID(s)
	if err != nil {
		return nil, fmt.Errorf("item %d: node ID %q: %w", it.Handle, it.NodeID, err)
	}
	spec := &itemSpec{handle: it.Handle, node: node,
		sampling: set.SamplingInterval, queue: set.QueueSize, discardOldest: set.DiscardOldest, filter: set.Filter}
	if it.DiscardOldest != nil {
		spec.discardOldest = *it.DiscardOldest
	}
	if it.Filter != nil {
		if err := it.Filter.Validate("filter"); err != nil {
			return nil, fmt.Errorf("item %d: %w", it.Handle, err)
		}
		f := *it.Filter
		spec.filter = &f
	}
	if it.SamplingInterval > 0 {
		spec.sampling = it.SamplingInterval
	}
	if it.QueueSize > 0 {
		spec.queue = it.QueueSize
	}
	if spec.queue == 0 {
		// Not configured: enough for the takeover window at this
		// item's own sampling interval.
		spec.queue = QueueSizeFor(spec.sampling, set.PublishingInterval, set.TakeoverWindow)
	}
	return spec, nil
}

// itemSpec is a registered data item, as the Pair monitors it.
type itemSpec struct {
	handle   uint32
	node     NodeID
	sampling time.Duration
	queue    uint32

	discardOldest bool
	filter        *DataChangeFilter // nil: the server's default
}

func (a itemSpec) same(b itemSpec) bool {
	return a.handle == b.handle && a.node.String() == b.node.String() && a.sampling == b.sampling && a.queue == b.queue &&
		a.discardOldest == b.discardOldest && a.filter.same(b.filter)
}
