// Package jsapi sends requests to the JetStream API by subject, for the
// calls the jetstream client package does not make: those to another
// JetStream domain's API prefix, and those it answers from a replica.
package jsapi

import (
	"context"
	"encoding/json"
	"errors"
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

// errNoMessageFound is the API's error code for a get that finds no
// message.
const errNoMessageFound = 10037

// LastFor reads the newest message on subject through the message get
// API at apiSubject ($JS.API.STREAM.MSG.GET.<stream>, with a domain's
// prefix where one applies). The stream's leader answers it, never a
// replica or a mirror, so it sees every committed write, unlike a direct
// get. A subject with no message gives nil and no error.
func LastFor(ctx context.Context, nc *nats.Conn, apiSubject, subject string) (*api.StoredMsg, error) {
	req, err := json.Marshal(api.JSApiMsgGetRequest{LastFor: subject})
	if err != nil {
		return nil, err
	}
	var resp api.JSApiMsgGetResponse
	err = Request(ctx, nc, apiSubject, req, &resp, &resp.JSApiResponse)
	var apiErr *api.ApiError
	if errors.As(err, &apiErr) && apiErr.ErrCode == errNoMessageFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if resp.Message == nil {
		return nil, fmt.Errorf("%s: the newest message on %s: empty reply", apiSubject, subject)
	}
	return resp.Message, nil
}
