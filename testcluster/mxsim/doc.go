// Package mxsim simulates MxAccess gateways for tests, benchmarks and
// demos: the gRPC service of mxaccess_gateway.v1 on a loopback port, with
// the real gateway's documented behaviour (one command at a time per
// session, bounded and timed-out commands, an event queue whose overflow
// faults the session, capabilities), in front of a Data that several
// gateways can share so that they serve the same values.
//
// Start starts a gateway; Kill, Restart and EndStreams play its process
// dying, coming back on the same port and shutting down gracefully, and
// Stats counts what it did. Library code never imports it.
package mxsim
