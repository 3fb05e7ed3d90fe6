// Package mxsource is the relay's source on MxAccess gateways: tag data
// of a plant's Galaxy, reached over gRPC (package mxgateway), from one
// gateway or a pair of them.
//
// With a pair the source keeps a session on each: the active one, whose
// items are advised and whose data changes the bridge relays, and a
// standby one, opened, registered and with its items added (mode warm) or
// advised too (mode hot). A gateway has no ServiceLevel, so the source
// judges the active itself: its event stream broken, a health ping past
// its deadline, or its heartbeats missing make it dead, and the standby is
// promoted at once. The switch reaches consumers as a refresh: the values
// that follow are every tag's current value.
//
// Every subscribe goes through the bridge's subscribe-storm guard (one
// request in flight, backoff, a ceiling on a lost reply), and costs the
// gateway as little as it can: on a supervisory session (write user 0) one
// SubscribeBulk with supervisory=true when the gateway advertises
// "bulk-subscribe-supervisory", and otherwise one AddItemBulk and a
// pipelined AdviseSupervisory per item; never a supervisory bulk request to
// a gateway that does not advertise it. docs/mxgateway.md has the rules
// and timelines.
package mxsource
