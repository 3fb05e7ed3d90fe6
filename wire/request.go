package wire

import "encoding/json"

// The bodies of the requests to a relay's services and of their replies,
// in JSON. docs/payload.md describes each service.

// SnapshotRequest is the optional body of a snapshot request.
type SnapshotRequest struct {
	// Source limits the snapshot to one source.
	Source string `json:"source,omitempty"`
	// Prefix limits it to tags whose subject starts with this, matched
	// literally: a relay refuses a wildcard in it.
	Prefix string `json:"prefix,omitempty"`
	// After continues a paged snapshot: the Next of the previous reply,
	// sent with the same Source and Prefix. A relay refuses anything else.
	After string `json:"after,omitempty"`
	// Limit caps the updates in the reply (default and maximum: the
	// relay's page size, 500 by default; a relay refuses more).
	Limit int `json:"limit,omitempty"`
}

// SnapshotReply is the answer: the last update of every tag (in subject
// order) that has one, each a payload DecodeJSON reads, and Next when
// more pages follow.
type SnapshotReply struct {
	Updates []json.RawMessage `json:"updates"`
	Next    string            `json:"next,omitempty"`
}

// WriteRequest is the body of a write-back request. A body that is not a
// JSON object is taken as the value itself.
type WriteRequest struct {
	Value json.RawMessage `json:"value"`
	// Type is the value's type; by default the type of the tag's last
	// value. A relay refuses a type other than that one: it is needed
	// only while the tag has no value yet.
	Type Type `json:"type,omitempty"`
}

// WriteReply answers a write-back request.
type WriteReply struct {
	OK      bool   `json:"ok"`
	Tag     string `json:"tag,omitempty"`
	Status  string `json:"status,omitempty"`
	Quality string `json:"quality,omitempty"`
	Error   string `json:"error,omitempty"`
}

// ErrorReply is the JSON body of an error reply of the status and
// snapshot endpoints; the micro error headers carry the same.
type ErrorReply struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}
