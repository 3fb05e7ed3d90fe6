package mxsource

import "github.com/apbridge/apbridge/bridge"

// statusOf maps an OPC DA quality, as MXAccess reports it, onto an OPC UA
// status code: the class from the top bits (192-255 good, 64-191
// uncertain, below 64 bad), and for a bad quality its reason. A Galaxy
// engine failing over behind the gateway shows here, as quality; it is
// not a reason for the relay to switch gateways.
func statusOf(q int32) bridge.StatusCode {
	switch {
	case q >= 0xC0:
		return bridge.StatusGood
	case q >= 0x40:
		return bridge.StatusUncertain
	}
	switch q & 0xFC {
	case 0x04: // configuration error
		return 0x80890000 // Bad_ConfigurationError
	case 0x08: // not connected
		return bridge.StatusBadNotConnected
	case 0x0C: // device failure
		return 0x808B0000 // Bad_DeviceFailure
	case 0x10: // sensor failure
		return 0x808C0000 // Bad_SensorFailure
	case 0x14: // last known value
		return 0x80310000 // Bad_NoCommunication
	case 0x18: // communication failure
		return bridge.StatusBadCommunicationErr
	case 0x1C: // out of service
		return bridge.StatusBadOutOfService
	case 0x20: // waiting for initial data
		return bridge.StatusBadWaitingForInit
	}
	return bridge.StatusBad
}
