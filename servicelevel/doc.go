// Package servicelevel keeps an OPC UA client on the healthy server of a
// redundant pair, using the health each server publishes in its
// ServiceLevel (node i=2267).
//
// OPC UA servers run as non-transparent redundant pairs: both are
// reachable, each publishes a ServiceLevel byte, and the client chooses.
// Part 4 splits the byte into bands (see Band): 0 Maintenance, 1 NoData,
// 2-199 Degraded, 200-255 Healthy. A client that only reconnects on socket
// errors sits forever on a Warm standby (which serves BadOutOfService at a
// level below 200), waits out a minute of retries on a server that said it
// was stopping, or leaves a 250 primary for a 240 secondary on a network
// blip. This package holds the decisions that avoid all three, as pure
// code:
//
//   - Level and Band classify samples; Level keeps "unknown" (a failed read,
//     a Bad status, a value that is not a Byte) apart from every byte,
//     because an unreadable level is evidence of nothing.
//   - Calculate and Calculator are the server side: the tiers a redundant
//     server publishes (0/100/200/240/250) from its membership, config
//     store, staleness, peer probe and primary role. The test server pair
//     and anyone building a server use them.
//   - FailoverConfig is the per-pair configuration, shaped like the
//     "serviceLevelFailover" block of the ServiceLevel-aware failover
//     design plus the connectivity retry knobs, with validation errors
//     that name the field and its range.
//   - Policy is the client side: a state machine on an injected clock that
//     a supervisor feeds with session, sample, probe and link events, and
//     that answers with what to do (probe the standby, switch, reconnect)
//     and why. It implements every rule of docs/servicelevel.md.
//   - Pair is that supervisor: one gopcua client per endpoint, a warm
//     standby session, data items keyed by client handle that move to the
//     promoted endpoint framed as a snapshot, liveness checks of its own
//     (a CurrentTime heartbeat, ServiceLevel reads with a deadline), a
//     write gate, events and log lines.
//
// Everything but the Pair is pure: it performs no I/O, starts no goroutine
// and never reads the clock, so every rule is tested by feeding events at
// chosen instants. The Pair does the I/O and executes the Policy's
// decisions.
package servicelevel
