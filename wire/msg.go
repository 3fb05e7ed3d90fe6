package wire

import (
	"unsafe"

	"github.com/nats-io/nats.go"
)

// msgHeaderSlots is the size hint of an update's header map: the five
// headers SetHeaders writes, HeaderEpoch (the bridge's), the JetStream
// sink's message ID and the rare HeaderRefresh fill it. Eight is the most
// a map keeps in one group of slots; a ninth hint would double what every
// message kept in the replay buffer holds (1,208 bytes instead of some
// 860), so a fleet relay's two headers (HeaderLease, HeaderRelay) grow
// the map instead, for its messages alone.
const msgHeaderSlots = 8

// msgBox is an update's message and its header values in one allocation.
type msgBox struct {
	m    nats.Msg
	vals [6]string
}

// EncodeMsg returns the message of update u on subject, as the relay
// publishes it: AppendJSON's payload as Data and, with headers, the
// headers SetHeaders writes (and HeaderRefresh "true" with refresh). typ
// must be TypeOf(u.Value), which the caller has already checked (a value
// of a type TypeOf does not know has no payload: see Unsupported), so that
// the type is worked out once per update; sizeHint is the expected payload
// length (the last one of the tag's source, say).
//
// It costs three allocations: the payload, the message with its header
// values, and the header map. The values of the status, sequence and
// timestamp headers are the payload's own bytes (the same text), so the
// message must not be changed in place once built: a sink may add headers
// and replace Data, never write into it. Data's capacity is its length, so
// an append copies.
func EncodeMsg(subject string, u *Update, typ Type, sizeHint int, headers, refresh bool) *nats.Msg {
	if !headers {
		data := appendJSON(make([]byte, 0, sizeHint), u, typ, nil)
		return &nats.Msg{Subject: subject, Data: data[:len(data):len(data)]}
	}
	return encodeMsg(&msgBox{}, make(nats.Header, msgHeaderSlots), subject, u, typ, sizeHint, refresh)
}

// MsgBuf is a message and its header map that EncodeMsgTo fills again
// for every update: for a sink that is done with the message when its
// publish returns (the core sink: apconn.PublishOwned keeps the payload
// and the header strings, neither the message nor its map). The zero
// value is ready; a MsgBuf is for one update at a time.
type MsgBuf struct {
	box msgBox
	h   nats.Header
}

// EncodeMsgTo is EncodeMsg into b: the message it returns is b's, and
// valid until the next EncodeMsgTo on b. Only the payload is new, one
// allocation instead of three (the message and the header map are some
// 600 bytes of the 860 EncodeMsg allocates).
func EncodeMsgTo(b *MsgBuf, subject string, u *Update, typ Type, sizeHint int, headers, refresh bool) *nats.Msg {
	if !headers {
		data := appendJSON(make([]byte, 0, sizeHint), u, typ, nil)
		b.box = msgBox{m: nats.Msg{Subject: subject, Data: data[:len(data):len(data)]}}
		return &b.box.m
	}
	if b.h == nil {
		b.h = make(nats.Header, msgHeaderSlots)
	}
	clear(b.h)
	// The last payload's text goes: the values are set again below.
	b.box = msgBox{}
	return encodeMsg(&b.box, b.h, subject, u, typ, sizeHint, refresh)
}

// encodeMsg encodes u into box's message with the header map h, empty.
func encodeMsg(box *msgBox, h nats.Header, subject string, u *Update, typ Type, sizeHint int, refresh bool) *nats.Msg {
	var mk jsonMarks
	data := appendJSON(make([]byte, 0, sizeHint), u, typ, &mk)
	data = data[:len(data):len(data)]
	box.m = nats.Msg{Subject: subject, Data: data}
	text := func(at [2]int) string {
		return unsafe.String(&data[at[0]], at[1]-at[0])
	}
	set := func(i int, k, v string) {
		box.vals[i] = v
		h[k] = box.vals[i : i+1 : i+1]
	}
	set(0, HeaderQuality, u.Status.Quality().String())
	set(1, HeaderStatus, text(mk.status))
	set(2, HeaderSeq, text(mk.seq))
	if mk.sourceTime[1] > 0 {
		set(3, HeaderSourceTime, text(mk.sourceTime))
	}
	if mk.serverTime[1] > 0 {
		set(4, HeaderServerTime, text(mk.serverTime))
	}
	if refresh {
		set(5, HeaderRefresh, "true")
	}
	box.m.Header = h
	return &box.m
}
