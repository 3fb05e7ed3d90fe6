// Package faultproxy is a TCP proxy that injects real network faults
// between a client and one server: added latency, connections reset (RST)
// or closed (FIN), refused connections, and a frozen link that passes
// nothing while every socket stays open.
//
// The embedded NATS nodes and OPC UA servers that apbridge is tested on
// sit behind such proxies; a test can put one in front of any other TCP
// server with New. Library code never imports it.
package faultproxy
