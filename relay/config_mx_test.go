package relay

import (
	"strings"
	"testing"
	"time"
)

const mxConfig = `
nats:
  servers: [nats://127.0.0.1:4222]
sources:
  - name: line1
    endpoints: [opc.tcp://127.0.0.1:4840, opc.tcp://127.0.0.1:4841]
    mode: hot
    tags:
      - {name: Temp, address: "ns=2;s=Line1.Temp"}
  - name: galaxy
    type: mxgateway
    endpoints: [127.0.0.1:5001, 127.0.0.1:5002]
    mode: hot
    writeUserId: 0
    commandTimeout: 90s
    subscribeParallelism: 8
    tags:
      - {name: pump1_pv, address: Pump_001.PV}
      - {name: pump1_sp, address: Pump_001.SP, writable: true}
`

func TestMxGatewaySourceConfig(t *testing.T) {
	c, err := Parse([]byte(mxConfig))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sources) != 2 {
		t.Fatalf("sources: %+v", c.Sources)
	}
	// The two types share endpoints and mode: each gets its own.
	if ua := c.Sources[0]; string(ua.Mode) != "hot" || len(ua.Endpoints) != 2 || ua.MxGateway.Endpoints != nil {
		t.Errorf("opcua source: %+v", ua)
	}
	mx := c.Sources[1].MxGateway
	if c.Sources[1].Type != TypeMxGateway || len(mx.Endpoints) != 2 || mx.Mode != "hot" || mx.CommandTimeout != 90*time.Second ||
		mx.SubscribeParallelism != 8 || len(mx.Tags) != 2 || !mx.Tags[1].Writable || c.Sources[1].Endpoints != nil {
		t.Errorf("mxgateway source: %+v", c.Sources[1])
	}
}

func TestBadMxGatewayConfigs(t *testing.T) {
	tests := []struct{ name, old, new, want string }{
		{"unknown field, with its line", "    writeUserId: 0", "    writeUserId: 0\n    colour: blue", "line 15: sources[1].colour: unknown field (valid here: clientName,"},
		{"an opcua field", "    writeUserId: 0", "    writeUserId: 0\n    serviceLevelFailover: {enabled: true}", "sources[1].serviceLevelFailover: unknown field"},
		{"endpoint with a scheme", "127.0.0.1:5002", "grpc://127.0.0.1:5002", "sources[1].endpoints[1]: \"grpc://127.0.0.1:5002\": give host:port"},
		{"same endpoint twice", "127.0.0.1:5002", "127.0.0.1:5001", "sources[1].endpoints[1]: \"127.0.0.1:5001\" is listed twice"},
		{"three endpoints", "127.0.0.1:5002]", "127.0.0.1:5002, 127.0.0.1:5003]", "sources[1].endpoints: 3 given"},
		{"port", "127.0.0.1:5002", "127.0.0.1:70000", "port \"70000\" is out of range (valid 1-65535)"},
		{"write user", "writeUserId: 0", "writeUserId: -1", "sources[1].writeUserId: -1 is out of range"},
		{"command timeout", "commandTimeout: 90s", "commandTimeout: 20m", "sources[1].commandTimeout: 20m0s is out of range (valid 1s-10m0s)"},
		{"parallelism", "subscribeParallelism: 8", "subscribeParallelism: 200", "sources[1].subscribeParallelism: 200 is out of range (valid 1-128)"},
		{"mode", "    mode: hot\n    writeUserId", "    mode: prepared\n    writeUserId", "sources[1].mode: \"prepared\" is not valid (valid: warm, hot)"},
		{"token without tls", "    writeUserId: 0", "    writeUserId: 0\n    token: secret", "sources[1].token: a token needs tls"},
		{"address", "Pump_001.PV}", "Pump_001}", "sources[1].tags[0].address: \"Pump_001\" is not Object.Attribute"},
		{"address with a space", "Pump_001.PV}", "'Pump 001.PV'}", "holds a space"},
		{"duplicate tag", "name: pump1_sp", "name: pump1_pv", "sources[1].tags[1].name: tag \"pump1_pv\" is listed twice"},
		{"no tags", "    tags:\n      - {name: pump1_pv, address: Pump_001.PV}\n      - {name: pump1_sp, address: Pump_001.SP, writable: true}\n", "", "sources[1].tags: a gateway source needs tags"},
		{"type", "type: mxgateway", "type: modbus", "sources[1].type: \"modbus\" is not valid (valid: opcua, mxgateway)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := strings.Replace(mxConfig, tt.old, tt.new, 1)
			if cfg == mxConfig {
				t.Fatalf("the edit %q changed nothing", tt.old)
			}
			_, err := Parse([]byte(cfg))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
