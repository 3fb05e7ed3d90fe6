package apconn

import (
	"time"

	"github.com/nats-io/nats.go"
)

// PassiveRTT returns the smallest round trip in the passive's recent
// window, the figure a fast cutover weighs against the active's, or -1
// with no passive.
func PassiveRTT(c *Conn) time.Duration {
	c.mu.Lock()
	p := c.passive
	c.mu.Unlock()
	if p == nil {
		return -1
	}
	return p.rtt.min()
}

// MsgSize is what the replay buffer counts for a message PublishOwned
// keeps.
func MsgSize(m *nats.Msg) int { return msgSize(m) }
