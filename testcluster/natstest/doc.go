// Package natstest runs an embedded nats-server cluster on loopback for
// tests, benchmarks and demos, and checks what it delivers and stores.
//
// Start starts the cluster and returns once every node forwards to every
// other node end to end. Its nodes can be put in lame-duck mode, killed and
// restarted on their old ports, behind a faultproxy.Proxy each on request
// (WithProxies, WithClientRTT); WithTLS serves TLS with a CA made at start;
// WithAccounts gives the nodes accounts with exports and imports.
// With JetStream (WithJetStream), StreamState, StreamLeader and
// WaitStreamCurrent tell where a stream's replicas are, ReadStream reads
// one back and Audit compares it with what a source produced. Traffic
// publishes sequence-numbered messages and reports what a subscriber lost,
// got twice or out of order, and the silences.
//
// Library code never imports it.
package natstest
