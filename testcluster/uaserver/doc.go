// Package uaserver runs a redundant pair of OPC UA servers, A and B, in
// process and on loopback, for tests, benchmarks and demos: a
// non-transparent redundant pair (OPC UA Part 4, 6.6.2) whose servers each
// publish their own ServiceLevel and serve one simulated process, each
// behind a faultproxy.Proxy so that link faults and process death are real
// TCP events.
//
// StartPair starts the pair. A Server's level can be set or scripted (Boot,
// GracefulStop), the server killed and restarted on its endpoint, its
// clients' links dropped, reset or frozen. The servers implement sessions,
// subscriptions and monitored items themselves, as Part 4 asks, on
// gopcua's transport (see docs/testcluster.md).
//
// Library code never imports it.
package uaserver
