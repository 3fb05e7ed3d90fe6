// Package edge watches the store and forward of an edge site: a relay
// that stores its updates in a JetStream stream of the site's own domain,
// on a leaf node cluster at the site, and a hub stream that sources that
// stream across the WAN (docs/edge.md). NATS does the storing and the
// forwarding; this package only looks: the site stream's fill, the rate
// it fills at and so how long an outage it can still absorb before a
// limit discards anything, how far the hub's sourcing lags and when the
// hub last caught up.
package edge
