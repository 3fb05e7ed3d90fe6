package uaclient

import (
	"context"
	"time"

	"github.com/apbridge/apbridge/servicelevel"

	"github.com/gopcua/opcua/ua"
)

// Client handles of the health subscription's items. The data items live
// in another subscription, so these never collide with the user's.
const (
	handleServiceLevel uint32 = 1
	handleCurrentTime  uint32 = 2
)

// session is the Pair's loop's view of one session on one endpoint: its
// phase, the promotion or recovery it is in, the levels it sampled, its
// subscriptions' sequencing and what its data path has delivered. The loop
// alone reads and writes it. Its conn does the I/O.
type session struct {
	p    *Pair
	ep   servicelevel.Endpoint
	id   uint64
	conn *conn

	phase phase
	// promotion is set while the Policy wants s to carry the data and it
	// does not yet; resumed while s recovers a lost session it took over.
	promotion    *promotion
	resumed      *resumption
	level        servicelevel.Level
	sampled      bool // a level was sampled (it may be Unknown)
	levelProblem string
	lastBeat     time.Time                // last answer of the health subscription
	lastData     time.Time                // last answer of the data subscription
	nextPoll     time.Time                // when the next ServiceLevel poll is due
	polling      bool                     // a poll's read is in flight
	wantVer      uint64                   // version of the last desire sent
	subs         map[uint32]*subscription // by subscription ID
	// fence holds, per item, the snapshot's value while no newer one has
	// been delivered: a data change that repeats or predates it is stale.
	fence    map[uint32]*ua.DataValue
	attempt  int
	lastMsgs [2][]dataNote // the last two data messages handed on while serving
	items    []HandoffItem // the data items as last reconciled, for the Handoff
	// switchFence, set when s took the data path over from another
	// session (cutOver), holds the snapshot's values while the Handoff
	// needs them: it names no subscription while the snapshot is read
	// (recordFrom 0), then the data subscription with these values as
	// the items' fences until its message recordFrom (the first after
	// the snapshot) is stored (recordHandoff); nil after.
	switchFence map[uint32]*ua.DataValue
	recordFrom  uint32
}

func newSession(p *Pair, ep servicelevel.Endpoint, id uint64, dialTimeout time.Duration) *session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{p: p, ep: ep, id: id}
	s.conn = &conn{
		p: p, s: s, ep: ep, url: p.urls[ep], readInfo: !p.single || p.set.DiscoverPartner,
		ctx: ctx, cancel: cancel, dialTimeout: dialTimeout,
		kick:   make(chan struct{}, 1),
		exited: make(chan struct{}),
	}
	return s
}
