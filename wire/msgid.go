package wire

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"time"
)

// MessageID returns a stable identity of an update of source, used as the
// JetStream message ID (the Nats-Msg-Id header) by sinks that deduplicate:
// a hash of the source's own identity of the update, its source name,
// tag, timestamp (the source timestamp, or the server timestamp when the
// source gives none), status code, type and value. It never depends on
// the relay (not on Seq, not on when or where it was relayed), so any
// relay produces the same ID for the same update and the stream's
// duplicate window keeps one copy. docs/jetstream.md says when two
// different updates could share an ID.
func MessageID(source string, u *Update) string {
	return MessageIDSum(source, u).String()
}

// IDSum is the 16 bytes of a message ID: for a record of many IDs that
// holds no pointers.
type IDSum [16]byte

// String returns the message ID: the unpadded base64url text of the sum.
func (s IDSum) String() string { return base64.RawURLEncoding.EncodeToString(s[:]) }

// MessageIDSum returns the sum MessageID is the text of.
func MessageIDSum(source string, u *Update) IDSum {
	var buf [256]byte
	b := append(buf[:0], "apb1"...)
	b = appendField(b, source)
	b = appendField(b, u.Tag)
	switch {
	case !u.SourceTime.IsZero():
		b = appendTime(append(b, 's'), u.SourceTime)
	case !u.ServerTime.IsZero():
		b = appendTime(append(b, 'v'), u.ServerTime)
	default:
		b = append(b, 'n')
	}
	b = binary.BigEndian.AppendUint32(b, uint32(u.Status))
	typ, _ := TypeOf(u.Value)
	b = appendField(b, string(typ))
	b = appendValue(b, u.Value)
	b = appendField(b, u.Err)
	sum := sha256.Sum256(b)
	return IDSum(sum[:16])
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(t.Unix()))
	return binary.BigEndian.AppendUint32(b, uint32(t.Nanosecond()))
}
