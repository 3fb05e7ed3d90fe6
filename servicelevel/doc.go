// Package servicelevel decides when a client of a redundant pair of OPC UA
// servers should leave one for the other, using the health each server
// publishes in its ServiceLevel (node i=2267).
//
// OPC UA servers run as non-transparent redundant pairs: both are
// reachable, each publishes a ServiceLevel byte, and the client chooses.
// Part 4 splits the byte into bands (see Band): 0 Maintenance, 1 NoData,
// 2-199 Degraded, 200-255 Healthy. A client that only reconnects on socket
// errors sits forever on a Warm standby (which serves BadOutOfService at a
// level below 200), waits out a minute of retries on a server that said it
// was stopping, or leaves a 250 primary for a 240 secondary on a network
// blip. This package holds the decisions that avoid all three:
//
//   - Level and Band classify samples; Level keeps "unknown" (a failed read,
//     a Bad status, a value that is not a Byte) apart from every byte,
//     because an unreadable level is evidence of nothing.
//   - Endpoint, Action, Cause, Decision and Observation are the vocabulary
//     the Policy answers in: which endpoint, what to do, why, and the
//     events worth telling a user.
//   - FailoverConfig is the per-pair configuration, shaped like the
//     "serviceLevelFailover" block of the ServiceLevel-aware failover
//     design plus the connectivity retry knobs, with validation errors
//     that name the field and its range.
//   - Policy is a state machine on an injected clock that a supervisor
//     feeds with session, sample, probe and link events, and that answers
//     with what to do (probe the standby, switch, reconnect) and why. It
//     implements every rule of docs/servicelevel.md.
//
// The package is pure: it performs no I/O, starts no goroutine, never
// reads the clock and links no OPC UA client, so every rule is tested by
// feeding events at chosen instants. The supervisor that does the I/O (the
// sessions to both servers, the warm standby, the data items) and executes
// the Policy's decisions is package uaclient's Pair.
package servicelevel
