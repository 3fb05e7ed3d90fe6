// Package simsource holds bridge sources for tests that need no server: a
// Source that emits counters on demand or at a rate and can be made to
// subscribe slowly, fail or hang, and Shared, one source fanned out to
// several relays' bridges at once, as hot-hot relays see one server pair,
// with a record of what it produced to audit a stream against.
//
// Library code never imports it.
package simsource
