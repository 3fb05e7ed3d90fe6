package apconn

import (
	"time"
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

// HeldConn is a Conn with no broker: what it is given is held in its
// replay buffer, bounded by max bytes.
func HeldConn(max int) *Conn {
	c := &Conn{}
	c.pub.ledger.max = max
	return c
}

// LedgerBytes is what the replay buffer counts for what it holds.
func LedgerBytes(c *Conn) int {
	c.pub.mu.Lock()
	defer c.pub.mu.Unlock()
	return c.pub.ledger.bytes
}
