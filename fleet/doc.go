// Package fleet divides source pairs between relays through a replicated
// JetStream key-value bucket, with no coordinator of its own: one lease key
// per pair (won with Create, renewed with a compare-and-set Update, expired
// by the bucket's TTL), one membership key per relay, and rendezvous
// (highest random weight) placement over the live relays.
//
// A Member joins a fleet with a NATS connection and the list of pairs, and
// tells its handler, on one goroutine and in order, "you own X (token t)"
// and "you lost X (cause)". While it owns a pair it renews the lease; when
// renewals fail it fences itself (Valid reports false) before the lease
// can have expired, so that two members never publish for one pair at
// once except inside the window docs/fleet.md states. The fencing token is
// the revision at which the lease was won: it only grows from one owner to
// the next.
//
// The package knows nothing of bridges or sources: package relay wires it
// so that a relay runs only the sources it owns.
package fleet
