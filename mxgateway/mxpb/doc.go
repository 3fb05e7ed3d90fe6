// Package mxpb is the generated Go code of the MxAccess gateway contract
// in proto/mxaccess_gateway/v1 (`make proto` regenerates it). Use package
// mxgateway to talk to a gateway; this package is its wire format.
package mxpb
