// Package wire is what a relay puts on NATS and what a consumer reads
// back, with nothing of the relay itself: a program that decodes updates
// or addresses a relay's services imports this package, and links neither
// the relay's NATS connection (apconn) nor its core (bridge). It depends
// on nats.go only.
//
// An update of a tag (Update: its value, StatusCode and timestamps) is
// published on the tag's subject as a JSON object (AppendJSON; DecodeJSON
// is its inverse, DecodeValue reads one value of a Type), with its
// quality, status, sequence number and timestamps repeated in headers
// (SetHeaders and the Header constants) so that a consumer can filter
// without decoding. MessageID is the identity by which a JetStream stream
// keeps one copy of an update.
//
// A Mapper turns a tag's name into its subject from the relay's subject
// template (DefaultSubject unless configured). The relay's services
// answer on subjects below its prefix (DefaultPrefix unless configured):
// StatusSubject, SnapshotSubject (SnapshotRequest, SnapshotReply) and
// WriteSubject (WriteRequest, WriteReply), with an ErrorReply on failure;
// it publishes each source's events on EventSubject.
// ServiceSubjects lists them all, and Patterns answers whether a subject
// or pattern overlaps them or lies within a stream's.
//
// docs/payload.md describes the payload, the headers and the services.
package wire
