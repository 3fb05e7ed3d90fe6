// Package testcluster runs the servers apbridge is tested, benchmarked and
// demonstrated on, in process and on loopback: an embedded nats-server
// cluster (StartNATS) with lame-duck, kill and restart controls, a
// redundant OPC UA server pair, and an MxAccess gateway simulator
// (StartMxGateway) whose gateways share one data source. The NATS nodes
// and the OPC UA servers sit behind the TCP fault proxies of package
// faultproxy.
//
// It is a public package so that users of apbridge can run their own tests
// on the same servers. Library code never imports it.
package testcluster
