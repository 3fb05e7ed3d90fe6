package uaclient

import (
	"fmt"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua/ua"
)

// UpdateKind says what an Update carries.
type UpdateKind uint8

const (
	// UpdateData is a data change of one item (Handle, Value).
	UpdateData UpdateKind = iota + 1
	// UpdateRefreshStart opens a snapshot: the data path has been
	// (re)established on Endpoint, and the current value of every item
	// follows. Cause is CauseStartup, CauseReconnect or the failover's
	// cause; Items is how many values follow.
	UpdateRefreshStart
	// UpdateRefreshValue is the current value of one item inside a
	// snapshot (Handle, Value). An item the server rejected carries the
	// rejection as its Value.Status.
	UpdateRefreshValue
	// UpdateRefreshEnd closes the snapshot: every item has been given.
	// Consumers reconcile here (an item they hold that was not in the
	// snapshot is gone). A refresh start followed by another refresh
	// start, with no end between, was cut short (the new server was lost
	// mid-snapshot): reconcile at the later snapshot's end only.
	UpdateRefreshEnd
)

var updateKindNames = [...]string{
	UpdateData:         "data",
	UpdateRefreshStart: "refresh start",
	UpdateRefreshValue: "refresh value",
	UpdateRefreshEnd:   "refresh end",
}

// String returns the kind's name.
func (k UpdateKind) String() string {
	if k > 0 && int(k) < len(updateKindNames) {
		return updateKindNames[k]
	}
	return fmt.Sprintf("UpdateKind(%d)", uint8(k))
}

// Update is one piece of the Pair's output: a data change, or part of the
// snapshot framing a promotion. Updates are delivered in order, on one
// goroutine of the Pair.
type Update struct {
	// Kind says what the update carries.
	Kind UpdateKind
	// Epoch numbers snapshots from 1. Data changes carry the epoch of the
	// snapshot they follow.
	Epoch uint64
	// Endpoint is the server the value came from.
	Endpoint servicelevel.Endpoint
	// Handle is the item's client handle (data and refresh values).
	Handle uint32
	// Value is the value with its status and source and server timestamps
	// (data and refresh values). The Pair does not keep it.
	Value *ua.DataValue
	// Cause is why the snapshot was taken (refresh start).
	Cause servicelevel.Cause
	// Items is the number of refresh values that follow (refresh start).
	Items int
	// Received is when the Pair received the value, or when the snapshot
	// began.
	Received time.Time
}
