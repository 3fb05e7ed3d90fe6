// Package jsapi sends requests to the JetStream API by subject, for the
// calls the jetstream client package does not make: those to another
// JetStream domain's API prefix, and those it answers from a replica.
package jsapi

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/nats.go"
)

// Request sends one JetStream API request on subject and decodes the
// reply into resp; base is resp's embedded JSApiResponse, whose error it
// returns.
func Request(ctx context.Context, nc *nats.Conn, subject string, body []byte, resp any, base *api.JSApiResponse) error {
	m, err := nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(m.Data, resp); err != nil {
		return fmt.Errorf("%s: reply: %w", subject, err)
	}
	if base.Error != nil {
		return base.Error
	}
	return nil
}
