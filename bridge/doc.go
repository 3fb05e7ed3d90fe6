// Package bridge is the relay core: it relays tags from sources to NATS
// subjects over an apconn.Conn, every update with its value, quality and
// timestamps, in order per tag, without subscribe storms, with write-back
// and last-value snapshots. It knows no source or sink technology.
//
// A Source is anything that can subscribe a set of tags and report their
// updates (package opcuasource has the OPC UA one); a Sink is where encoded
// updates go (core NATS by default, package jetstreamsink stores them in a
// stream). Both interfaces, and the optional Binder, Aborter and
// StatusReporter a sink may implement, are all a source or sink written
// outside this module needs. The Bridge maps each tag to a subject
// (wire.Mapper), encodes updates as JSON with their quality and timestamps also
// in headers (package wire, which consumers import), keeps the last value
// of every tag for snapshots, and guards each source against subscribe
// storms (GuardConfig).
// docs/architecture.md describes the data path.
package bridge
