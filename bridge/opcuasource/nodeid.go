package opcuasource

import "github.com/apbridge/apbridge/uaclient"

// ValidateNodeID checks that s is an OPC UA node ID in its string form
// (ns=2;s=Line1.Temp, i=2258, ns=3;g=..., ns=1;b=...) or by namespace URI
// (nsu=urn:plant;s=Line1.Temp), as uaclient.ParseNodeID takes it.
func ValidateNodeID(s string) error {
	return uaclient.CheckNodeID(s)
}
