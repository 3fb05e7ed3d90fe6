package uaclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/servicelevel"

	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

// PairOption configures a Pair. It follows the project's one options
// style (nats.go's): a function that sets a field of the unexported
// options and returns an error for an invalid value, which NewPair returns
// wrapped with the package name.
type PairOption func(*options) error

// options holds what the PairOptions set; defaultOptions gives the
// defaults they start from.
type options struct {
	name       string
	logger     zerolog.Logger
	onData     func(Update)
	onEvent    func(Event)
	clientOpts []opcua.Option    // both endpoints
	endpOpts   [2][]opcua.Option // per endpoint, after clientOpts
	dialOpts   DialOptionsFunc   // per connection, after endpOpts
	backlog    int
	publishers int // Publish requests outstanding per session
	// afterStore, if set, defers the data messages' acknowledgements
	// until what they carried is stored (WithAckAfterStore); unstored
	// bounds the messages waiting for it.
	afterStore func(done func())
	unstored   int
	onHandoff  func(Handoff)
	// syncHandoff waits until what onHandoff was given is durable
	// (WithHandoffSync).
	syncHandoff func(context.Context) error
	// takeover is a predecessor's handoff (WithTakeover); keepAtClose
	// leaves the data subscription at Close (WithKeepSubscriptionAtClose).
	takeover    *Handoff
	keepAtClose bool
	// selectEndpoint picks the partner's endpoint among those its server
	// offers (partner discovery); partnerRetry is how long after a
	// discovery that found nothing the next one starts.
	selectEndpoint EndpointSelector
	partnerRetry   time.Duration

	// dropMessage, if set, drops the data messages of the sessions' data
	// subscriptions for which it returns true, as if they never arrived:
	// the tests' way to open a gap the server cannot fill.
	dropMessage func(seq uint32) bool
	// strictPhases makes a session transition that the phase table
	// does not list panic: the tests' way to catch one.
	strictPhases bool
}

func defaultOptions() options {
	return options{
		name:           "apbridge",
		logger:         zerolog.Nop(),
		backlog:        1 << 16,
		unstored:       DefaultUnstoredLimit,
		publishers:     defaultPublishers,
		selectEndpoint: SelectNoneEndpoint,
		partnerRetry:   PartnerRetryInterval,
	}
}

// WithPairName names the Pair in its log lines and in the OPC UA session
// names ("<name>-primary", "<name>-backup"). Default "apbridge".
func WithPairName(name string) PairOption {
	return func(o *options) error {
		if name == "" {
			return errors.New("pair name: must not be empty")
		}
		o.name = name
		return nil
	}
}

// WithLogger logs through l: one line per Event, at Info for failovers,
// sessions and level changes, at Warn for failures and doubtful
// redundancy, at Error for what only a person can fix (a server refusing
// the client, both endpoints on one server), at Debug for probes and
// retries. Default: no logging.
func WithLogger(l zerolog.Logger) PairOption {
	return func(o *options) error {
		o.logger = l
		return nil
	}
}

// WithDataHandler calls h for every Update: data changes, and the snapshot
// (refresh start, one value per item, refresh end) that frames every
// (re)establishment of the data path. Updates are delivered in order on one
// goroutine of the Pair, which also runs the event handler; a slow handler
// delays later updates but never a failover decision. While more updates
// wait than the backlog allows (WithBacklog), the Pair stops asking the
// servers for more: OPC UA's own flow control, the servers' item queues
// then decide what is kept. h must not call Close.
func WithDataHandler(h func(Update)) PairOption {
	return func(o *options) error {
		o.onData = h
		return nil
	}
}

// WithEventHandler calls h for every Event, on the goroutine that runs the
// data handler, in order with the updates: an EventFailover comes before
// the snapshot of the promoted endpoint. h must not call Close.
func WithEventHandler(h func(Event)) PairOption {
	return func(o *options) error {
		o.onEvent = h
		return nil
	}
}

// WithBacklog bounds how many updates and events may wait for the
// handlers before the Pair stops asking the servers for more. While it
// holds back, the heartbeat gap checks stand down (the silence is the
// Pair's own) and the ServiceLevel polls alone watch the links. Default
// 65536; valid 16-16777216.
func WithBacklog(n int) PairOption {
	return func(o *options) error {
		if n < 16 || n > 1<<24 {
			return fmt.Errorf("backlog: %d is out of range (valid 16-16777216)", n)
		}
		o.backlog = n
		return nil
	}
}

// DefaultUnstoredLimit is how many data messages the Pair hands on and
// waits to see stored (WithAckAfterStore) before it holds its Publish
// requests back: below node-opcua's retransmission queue (100 messages per
// subscription) with room for the Publish requests outstanding, each of
// which can bring one more.
const DefaultUnstoredLimit = 64

// WithAckAfterStore makes the Pair acknowledge a data NotificationMessage
// to the server only once every update it carried is stored, not when it
// is handed to the data handler: a server keeps each message until it is
// acknowledged, so what the Pair's user holds unstored when it dies is
// still the server's, for a successor to ask for again. after is called
// on the data handler's goroutine, after the updates of one or more
// messages were handed to the data handler; it must not block, and must
// arrange for done to be called (on any goroutine, once; later calls do
// nothing) when every update handed to the data handler before the call
// is stored. A done never called holds the messages' acknowledgements,
// and at the limit (WithUnstoredLimit) the Publish requests, back.
// Keep-alives and the health subscription's messages are acknowledged as
// before. Default: off.
func WithAckAfterStore(after func(done func())) PairOption {
	return func(o *options) error {
		o.afterStore = after
		return nil
	}
}

// WithUnstoredLimit bounds the data messages handed on and not yet
// stored (WithAckAfterStore): above it the Pair sends no Publish request
// until some are stored, so the servers keep the rest in their
// retransmission queues and their items' queues. Keep it below the
// servers' retransmission queue (node-opcua keeps 100 messages per
// subscription; Part 4 asks at least twice the Publish requests a
// session keeps outstanding): a server drops the oldest message it holds
// beyond it, and a successor can no longer ask for it. Default
// DefaultUnstoredLimit; valid 4-100000.
func WithUnstoredLimit(n int) PairOption {
	return func(o *options) error {
		if n < 4 || n > 100000 {
			return fmt.Errorf("unstored limit: %d is out of range (valid 4-100000)", n)
		}
		o.unstored = n
		return nil
	}
}

// WithHandoffRecorder calls f with what a successor of the Pair needs to
// take its data subscription over (Handoff), each time it changes: a new
// serving session, its items reconciled, more of its messages
// acknowledged; at a switch of the serving session, a Handoff that names
// no subscription (WithHandoffSync). f runs on the Pair's loop: it must
// not block (keep the latest and write it elsewhere, throttled).
// Default: none.
func WithHandoffRecorder(f func(Handoff)) PairOption {
	return func(o *options) error {
		o.onHandoff = f
		return nil
	}
}

// WithHandoffSync makes the Pair wait, before it delivers anything of a
// session that takes the data path over from another (a failover, a new
// subscription replacing a lost one), until sync returns: sync must
// return once every Handoff given to the recorder (WithHandoffRecorder)
// before it is durable, or ctx ends. At such a switch the recorder is
// first told that nothing may be taken over (a Handoff whose DataSub is
// 0): the subscription the data came from until then may still hold
// messages older than what the new session is about to store, and a
// successor that took it over would store them after newer values. Once
// the new session's snapshot is read, the Handoff names its subscription,
// with the snapshot's values as fences (HandoffItem.Fence) until its
// first message after the snapshot is stored. sync runs on the
// data handler's goroutine and holds the data back while it runs: keep
// it short (one write) and bounded; the Pair gives up waiting after
// handoffSyncBound, or at Close. Default: none (the switch is recorded,
// but may be written after the new session's first values are stored).
func WithHandoffSync(sync func(ctx context.Context) error) PairOption {
	return func(o *options) error {
		o.syncHandoff = sync
		return nil
	}
}

// WithTakeover gives the Pair a predecessor's Handoff (the same relay
// before it restarted): the Pair starts on the handoff's endpoint as its
// active (the backup, if the predecessor served from it after a
// failover), and the first session there takes
// the predecessor's data subscription over instead of creating one
// (TransferSubscriptions, with the same identity and security as
// configured), asks the server again for every message from the first
// the predecessor did not acknowledge on (Republish), hands them on in
// order, and reaches Ready without a snapshot. Until the first AddItems
// the handoff's items are the Pair's (so that what the server gives back
// for them is relayed); that call's items then replace them, and only the
// differences are changed at the server. A handoff for another URL is
// ignored, with a warning. When the transfer fails the Pair creates new
// subscriptions, with a snapshot (EventTakeover). Default: none.
func WithTakeover(h Handoff) PairOption {
	return func(o *options) error {
		o.takeover = &h
		return nil
	}
}

// WithKeepSubscriptionAtClose makes Close leave the serving session's
// data subscription on the server for a successor (WithTakeover): the
// session is closed without deleting it (CloseSession with
// DeleteSubscriptions false; the health subscription is deleted). The
// server keeps the subscription, and queues its items' values, until its
// lifetime (PairStatus.Link.Data.Lifetime) runs out without a Publish
// request: a successor that comes within it loses nothing; one that never
// comes costs the server that subscription until then. Default: Close
// deletes every subscription.
func WithKeepSubscriptionAtClose() PairOption {
	return func(o *options) error {
		o.keepAtClose = true
		return nil
	}
}

// WithClientOptions passes gopcua client options to both endpoints'
// clients: security policy and mode, certificates and keys, user
// authentication, request and session timeouts, buffer sizes. Set buffer
// sizes with opcua.Dialer and a uacp.Dialer of your own: gopcua v0.8.0's
// ReceiveBufferSize, SendBufferSize, MaxMessageSize and MaxChunkCount
// write to a default that every client in the process shares. The Pair
// applies AutoReconnect(false) (it rebuilds sessions itself), its own
// session name and no StateChangedCh (gopcua blocks its reconnect loop on
// that channel) after them, so options that set those are overridden.
func WithClientOptions(opts ...opcua.Option) PairOption {
	return func(o *options) error {
		o.clientOpts = append(o.clientOpts, opts...)
		return nil
	}
}

// DialOptionsFunc returns client options that must be read from the
// server before each connection: its endpoints, certificate and user token
// policies (OPC UA GetEndpoints). ctx is bounded by the dial timeout; an
// error fails the connection attempt, as a dial error does.
type DialOptionsFunc func(ctx context.Context, e servicelevel.Endpoint, url string) ([]opcua.Option, error)

// WithDialOptions has the Pair call f before every connection to an
// endpoint (every session start, on both endpoints) and apply the options
// it returns after those of WithClientOptions and
// WithEndpointClientOptions. Secure channels need it: the client must
// take the server's certificate and thumbprint, and the user token's
// policy ID, from the endpoint the server describes, and a server's
// certificate can change between connections.
func WithDialOptions(f DialOptionsFunc) PairOption {
	return func(o *options) error {
		if f == nil {
			return errors.New("dial options: nil function")
		}
		o.dialOpts = f
		return nil
	}
}

// WithEndpointClientOptions is WithClientOptions for one endpoint only,
// for servers with different certificates or credentials. They apply after
// the options given to both.
func WithEndpointClientOptions(e servicelevel.Endpoint, opts ...opcua.Option) PairOption {
	return func(o *options) error {
		if e != servicelevel.Primary && e != servicelevel.Backup {
			return fmt.Errorf("endpoint client options: %v is not an endpoint (valid: primary, backup)", e)
		}
		o.endpOpts[e] = append(o.endpOpts[e], opts...)
		return nil
	}
}

// EndpointSelector picks, among the endpoints a server offers (OPC UA
// GetEndpoints), the one the Pair's clients connect to, or says why none
// fits. Partner discovery uses it for the endpoint of the partner found.
type EndpointSelector func(eps []*ua.EndpointDescription) (*ua.EndpointDescription, error)

// WithEndpointSelector has partner discovery (PairConfig.DiscoverPartner)
// take the partner's endpoint that f picks: the one that matches the
// client's security policy and mode. Default SelectNoneEndpoint, which
// matches the Pair's own default (security None). A source with security
// settings of its own passes its selection here (opcuasource's
// Security.PairOptions does).
func WithEndpointSelector(f EndpointSelector) PairOption {
	return func(o *options) error {
		if f == nil {
			return errors.New("endpoint selector: nil function")
		}
		o.selectEndpoint = f
		return nil
	}
}
