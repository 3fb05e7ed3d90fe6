package opcuasource

import (
	"errors"
	"regexp"

	"github.com/gopcua/opcua/ua"
)

// ValidateNodeID checks that s is an OPC UA node ID in its string form
// (ns=2;s=Line1.Temp, i=2258, ns=3;g=..., ns=1;b=...).
func ValidateNodeID(s string) error {
	if s == "" {
		return errors.New("empty node ID")
	}
	// gopcua reads anything without a type prefix as a string identifier;
	// a config that says "Line1.Temp" more likely forgot "ns=2;s=".
	if !nodeIDForm.MatchString(s) {
		return errors.New("want the string form [ns=<index>;]<i|s|g|b>=<identifier>, e.g. ns=2;s=Line1.Temp")
	}
	_, err := ua.ParseNodeID(s)
	return err
}

var nodeIDForm = regexp.MustCompile(`^(ns=\d+;|nsu=[^;]+;)?(i=\d+|s=.+|g=[0-9A-Fa-f-]{36}|b=.+)$`)
