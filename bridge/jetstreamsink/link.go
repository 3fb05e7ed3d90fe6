package jetstreamsink

import (
	"fmt"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsLink is a JetStream context on one active nats.Conn.
type jsLink struct {
	gen uint64
	nc  *nats.Conn
	js  jetstream.JetStream
}

func (s *Sink) newLink(nc *nats.Conn) (*jsLink, error) {
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncAckHandler(s.onAck),
		jetstream.WithPublishAsyncErrHandler(s.onErr),
		// The window bounds what is in flight; this only has to stay out
		// of the way (an entry can have two publishes outstanding after a
		// leader election).
		jetstream.WithPublishAsyncMaxPending(2*s.cfg.MaxPending+64),
		jetstream.WithPublishAsyncTimeout(s.cfg.AckTimeout))
	if err != nil {
		return nil, fmt.Errorf("bridge: jetstream: %w", err)
	}
	return &jsLink{nc: nc, js: js}, nil
}

func (s *Sink) onConnEvent(e apconn.Event) {
	switch e.Kind {
	case apconn.EventSwitched:
		s.relink()
	case apconn.EventReconnected:
		// The same nats.Conn is back: what failed while it was away is
		// sent now rather than at its backoff.
		s.mu.Lock()
		for _, r := range s.retry {
			r.retryAt = time.Time{}
		}
		s.mu.Unlock()
		s.wake()
	}
}

// relink moves publishing to the ApConnection's active nats.Conn if it
// changed, and sends every unacknowledged update again on it, in order.
func (s *Sink) relink() {
	nc := s.conn.Active()
	if nc == nil {
		return
	}
	s.mu.Lock()
	if s.closed || s.link.nc == nc {
		s.mu.Unlock()
		return
	}
	l, err := s.newLink(nc)
	if err != nil {
		s.mu.Unlock()
		s.log.Error().Err(err).Msg("no JetStream context on the new active connection")
		return
	}
	s.gen++
	l.gen = s.gen
	s.link = l
	n := s.resendAllLocked()
	s.mu.Unlock()
	s.stats.switches.Add(1)
	s.log.Info().Str("server", nc.ConnectedServerName()).Int("republishing", n).
		Msg("publishing moved to the new active connection: unacknowledged updates are sent again")
	s.wake()
}

// resendAllLocked marks every update in flight for an immediate resend
// and returns how many.
func (s *Sink) resendAllLocked() int {
	n := 0
	for e := s.head; e != nil; e = e.next {
		switch e.state {
		case stSent:
			e.state = stRetry
			e.retryAt = time.Time{}
			s.retry = append(s.retry, e)
			n++
		case stRetry:
			e.retryAt = time.Time{}
		}
	}
	return n
}

func (s *Sink) onLeaderElected(m *nats.Msg) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	n := s.resendAllLocked()
	s.mu.Unlock()
	s.stats.leaderResends.Add(1)
	s.log.Info().Int("republishing", n).Msg("stream leader elected: unacknowledged updates are sent again")
	s.wake()
}
