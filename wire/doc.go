// Package wire is what a relay puts on NATS and what a consumer reads
// back, with nothing of the relay itself: a program that decodes updates
// or addresses a relay's services imports this package and links neither
// the relay's NATS connection (apconn) nor its core (bridge).
//
// An update of a tag (Update: its value, StatusCode and timestamps) is
// published as a JSON object (AppendJSON; DecodeJSON is its inverse), with
// its quality, status, sequence number and timestamps repeated in headers
// (SetHeaders, the Header constants) so that a consumer can filter without
// decoding. MessageID is the identity JetStream deduplicates an update by.
// docs/payload.md describes the payload, the headers and the services.
package wire
