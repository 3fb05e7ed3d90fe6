// Package mxgateway is a client of an MxAccess gateway: the gRPC service
// that fronts an MXAccess worker and so reaches a plant's Galaxy tags.
//
// A Client is one gRPC channel to one gateway; Open starts a Session on
// it. A Session keeps what the gateway said at open (its capabilities, the
// command timeout it granted, its heartbeat interval) and runs the
// gateway's commands: Register, AddItems, SubscribeBulk, AdviseSupervisory,
// AdviseBulk, UnAdvise, RemoveItem, Write, Read and Ping. Events streams
// the session's data changes.
//
// The gateway runs one command at a time per session on a single-threaded
// worker, under a per-session command deadline. A bulk subscribe on a
// supervisory session (write user 0) must stay supervisory: SubscribeBulk
// refuses supervisory=true unless the gateway advertises
// CapBulkSubscribeSupervisory, because an older gateway ignores the flag,
// advises plainly and so silently breaks writes.
//
// How a stream ends matters, and Events' errors say which it was:
// ErrSessionEnded (the gateway ended the session in order: reopen and
// subscribe again), a *FaultError (the gateway faulted the session, e.g. an
// event queue overflow) or ErrDisconnected (the transport broke: the
// gateway may be gone).
//
// The relay's source on a pair of gateways is package bridge/mxsource.
package mxgateway
