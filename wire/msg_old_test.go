package wire_test

import (
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

func updateMessage(subject string, u *wire.Update) (*nats.Msg, error) {
	typ, _ := wire.TypeOf(u.Value)
	return wire.EncodeMsg(subject, u, typ, 250, true, false), nil
}
