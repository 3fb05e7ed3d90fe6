// Package uaclient is the OPC UA client of a redundant server pair: a
// Pair keeps a session on the server that carries the data and a warm
// standby session on the other, and executes the failover decisions of
// package servicelevel's Policy on them.
//
// The Pair is built of parts with one job each:
//
//   - The loop (loop.go) owns every decision: one event at a time, no
//     I/O, so that no server, link or handler can hold a decision up.
//   - A session (session.go, phase.go) is the loop's view of one session:
//     its phase (connecting, standby, promoting, cut over, serving,
//     recovering, dead), changed only along a table of transitions, and
//     the promotion or recovery it is in.
//   - A conn (conn.go) is a session's I/O: one gopcua client, with
//     AutoReconnect off, and the goroutines that use it (Publish requests,
//     the item worker, reads, writes); they talk to the loop by events.
//   - A subscription (subscription.go, sequencer.go) hands its
//     notifications on in sequence-number order, asks for a gap again
//     (Republish) and acknowledges what it handed on: pure, tested without
//     a server.
//   - The data path (datapath.go, hold.go, promote.go) turns data changes
//     into Updates: a promotion frames its snapshot, the departing
//     server's Bad_OutOfService samples are held at a planned switch, and
//     what repeats a snapshot is dropped.
//   - A lost link to a live server costs no snapshot (resume.go): the next
//     session activates the lost one on a new channel, or takes its
//     subscriptions over by a transfer, and asks for what it missed.
//
// Node IDs in their string form, by namespace index or URI, are NodeIDs
// (ParseNodeID). docs/servicelevel.md describes the failover rules and
// the timeline of every failover cause.
package uaclient
