// Package testcluster runs the servers apbridge is tested, benchmarked and
// demonstrated on, in process and on loopback: a redundant OPC UA server
// pair behind the TCP fault proxies of package faultproxy. The embedded
// NATS cluster is package natstest, the MxAccess gateway simulator package
// mxsim.
//
// It is a public package so that users of apbridge can run their own tests
// on the same servers. Library code never imports it.
package testcluster
