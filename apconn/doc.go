// Package apconn provides the ApConnection: a NATS connection made of a
// warm active and a warm passive nats.Conn on different brokers, which
// promotes the passive the moment the active's broker announces lame-duck
// mode (LDM), dies or stops answering.
//
// A broker restarted for maintenance tells its clients at once that it is
// going away and evicts them after a grace period (10 s by default). A
// plain nats.go client only gets a handler call; it rides the broker down
// and reconnects cold. A Conn keeps a second connection already connected,
// authenticated and proven to forward end to end through the cluster, and
// moves to it:
//
//   - subscriptions move make-before-break: they are established on the new
//     active before they are drained from the old one, and the copies that
//     arrive on both paths meanwhile are suppressed;
//   - publishes are never lost: every publish is kept until the broker has
//     confirmed it (a PING after it was answered), and what was not
//     confirmed when a broker dies is sent again on the new active, in
//     order;
//   - the switch itself runs on an executor of its own, never inside a
//     nats.go callback.
//
// What the Conn does about an LDM notice is set with WithLameDuckHandling
// (see package ldm). Whatever the setting, a dead active is replaced by the
// passive at once instead of walking nats.go's reconnect cycle, and with no
// usable passive the Conn falls back to nats.go's own reconnect: it is never
// worse than a plain connection.
//
// docs/apconn.md describes the model, the timeline of each switch cause and
// exactly what is and is not guaranteed.
package apconn
