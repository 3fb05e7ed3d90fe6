package mxsource

import (
	"fmt"
	"strings"
	"unicode"
)

// ValidateAddress checks an item address as MXAccess takes it:
// Object.Attribute (an object name, a dot, an attribute that may have
// dots of its own), without spaces or control characters, at most 329
// characters (a Galaxy object name is at most 32, a full reference 329).
func ValidateAddress(addr string) error {
	switch {
	case addr == "":
		return fmt.Errorf("empty (valid: Object.Attribute, e.g. Pump_001.PV)")
	case len(addr) > 329:
		return fmt.Errorf("%d characters is too long (valid: at most 329)", len(addr))
	}
	for _, r := range addr {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%q holds a space or control character (valid: Object.Attribute)", addr)
		}
	}
	obj, attr, ok := strings.Cut(addr, ".")
	if !ok || obj == "" || attr == "" || strings.HasSuffix(attr, ".") || strings.Contains(attr, "..") {
		return fmt.Errorf("%q is not Object.Attribute (e.g. Pump_001.PV)", addr)
	}
	return nil
}
