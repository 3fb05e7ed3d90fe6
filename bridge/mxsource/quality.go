package mxsource

import "github.com/apbridge/apbridge/wire"

// statusOf maps an OPC DA quality, as MXAccess reports it, onto an OPC UA
// status code: the class from the top bits (192-255 good, 64-191
// uncertain, below 64 bad), and for a bad quality its reason. A Galaxy
// engine failing over behind the gateway shows here, as quality; it is
// not a reason for the relay to switch gateways.
func statusOf(q int32) wire.StatusCode {
	switch {
	case q >= 0xC0:
		return wire.StatusGood
	case q >= 0x40:
		return wire.StatusUncertain
	}
	switch q & 0xFC {
	case 0x04: // configuration error
		return 0x80890000 // Bad_ConfigurationError
	case 0x08: // not connected
		return wire.StatusBadNotConnected
	case 0x0C: // device failure
		return 0x808B0000 // Bad_DeviceFailure
	case 0x10: // sensor failure
		return 0x808C0000 // Bad_SensorFailure
	case 0x14: // last known value
		return 0x80310000 // Bad_NoCommunication
	case 0x18: // communication failure
		return wire.StatusBadCommunicationErr
	case 0x1C: // out of service
		return wire.StatusBadOutOfService
	case 0x20: // waiting for initial data
		return wire.StatusBadWaitingForInit
	}
	return wire.StatusBad
}
