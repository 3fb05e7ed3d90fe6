package uaclient

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/gopcua/opcua/ua"
)

func TestIsRefusal(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{ua.StatusBadUserAccessDenied, true},
		{fmt.Errorf("activate session: %w", ua.StatusBadIdentityTokenRejected), true},
		{ua.StatusBadCertificateUntrusted, true},
		{&refusedError{errors.New("the server's certificate is not the pinned one")}, true},
		{fmt.Errorf("connect: %w", &refusedError{io.EOF}), true},
		{io.EOF, false},
		{ua.StatusBadTimeout, false},
		{ua.StatusBadServerHalted, false},
		{errors.New("dial tcp: connection refused"), false},
	} {
		if got := isRefusal(tc.err); got != tc.want {
			t.Errorf("isRefusal(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
