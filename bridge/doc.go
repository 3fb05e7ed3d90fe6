// Package bridge relays tags from sources (OPC UA server pairs, gateways)
// to NATS subjects over an apconn.Conn: every update with its value, quality
// and timestamps, in order per tag, without subscribe storms, with
// write-back and last-value snapshots.
//
// A Source is anything that can subscribe a set of tags and report their
// updates; OPCUASource runs on a servicelevel.Pair. The Bridge maps each
// tag to a subject (Mapper), encodes updates as JSON with their quality and
// timestamps also in headers (AppendJSON, SetHeaders), keeps the last value
// of every tag for late subscribers, and guards each source against
// subscribe storms (Guard). docs/architecture.md describes the data path.
package bridge
