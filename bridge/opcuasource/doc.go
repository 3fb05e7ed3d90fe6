// Package opcuasource is the bridge's OPC UA source: a bridge.Source on a
// redundant pair of OPC UA servers (or one server), run by a
// uaclient.Pair that follows the servers' ServiceLevel, keeps a warm
// standby session and promotes it. The package also holds what a relay
// needs to configure such a source: client security (Security),
// certificates (EnsureClientCertificate), node IDs (ValidateNodeID) and
// browsing a server's address space for tags (BrowseTags).
package opcuasource
