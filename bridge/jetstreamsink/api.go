package jetstreamsink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/apbridge/apbridge/internal/jsapi"
	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/nats.go"
)

// The sink speaks the JetStream API itself, with the request and reply
// types of jsm.go's api package. jsm.go's Manager and monitor packages
// would do it too, but they link the whole of nats-server into the relay
// binary; the two calls the sink needs are a few lines each.

// JetStream API error codes the sink acts on.
const (
	errCodeClusterNotAvailable = 10008
	errCodeStreamNameInUse     = 10058
	errCodeStreamNotFound      = 10059
	errCodeStreamOffline       = 10118
)

// APISubject returns the subject of a JetStream API request, subject as
// jsm.go's api templates spell it ("$JS.API.STREAM.INFO.X"), in the
// JetStream domain domain: "$JS.<domain>.API.STREAM.INFO.X", which reaches
// that domain's JetStream from any server joined to it by leaf node
// connections. An empty domain leaves subject as it is: the JetStream of
// the server the client is connected to.
func APISubject(domain, subject string) string {
	if domain == "" {
		return subject
	}
	if rest, ok := strings.CutPrefix(subject, "$JS.API."); ok {
		return "$JS." + domain + ".API." + rest
	}
	return subject
}

// streamInfo loads a stream's configuration, state and cluster
// information from the JetStream of domain ("" for the connected
// server's). A JetStream error is returned as an *api.ApiError.
func streamInfo(ctx context.Context, nc *nats.Conn, domain, name string) (*api.StreamInfo, error) {
	var resp api.JSApiStreamInfoResponse
	if err := jsapi.Request(ctx, nc, APISubject(domain, fmt.Sprintf(api.JSApiStreamInfoT, name)), nil, &resp, &resp.JSApiResponse); err != nil {
		return nil, err
	}
	if resp.StreamInfo == nil {
		return nil, fmt.Errorf("stream info of %q: empty reply", name)
	}
	return resp.StreamInfo, nil
}

// createStream creates a stream exactly as cfg says: the request is
// pedantic, so the server refuses rather than adjusts a setting. domain
// is as for streamInfo.
func createStream(ctx context.Context, nc *nats.Conn, domain string, cfg api.StreamConfig) (*api.StreamInfo, error) {
	req, err := json.Marshal(api.JSApiStreamCreateRequest{StreamConfig: cfg, Pedantic: true})
	if err != nil {
		return nil, err
	}
	var resp api.JSApiStreamCreateResponse
	if err := jsapi.Request(ctx, nc, APISubject(domain, fmt.Sprintf(api.JSApiStreamCreateT, cfg.Name)), req, &resp, &resp.JSApiResponse); err != nil {
		return nil, err
	}
	if resp.StreamInfo == nil {
		return nil, fmt.Errorf("create stream %q: empty reply", cfg.Name)
	}
	return resp.StreamInfo, nil
}

// isAPIError reports whether err is a JetStream API error with one of the
// given codes.
func isAPIError(err error, codes ...uint16) bool {
	var e *api.ApiError
	if !errors.As(err, &e) {
		return false
	}
	for _, c := range codes {
		if e.ErrCode == c {
			return true
		}
	}
	return false
}
