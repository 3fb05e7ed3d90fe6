package relay

import (
	"fmt"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/mxsource"
	"gopkg.in/yaml.v3"
)

// Source types, the values of SourceConfig.Type.
const (
	// TypeOPCUA is an OPC UA server pair, or one server (the default).
	TypeOPCUA = "opcua"
	// TypeMxGateway is an MxAccess gateway, or a pair of them.
	TypeMxGateway = "mxgateway"
)

// MxGatewayConfig is a type: mxgateway source's settings. In YAML they sit
// at the source's own level, beside name and type:
//
//   - name: galaxy
//     type: mxgateway
//     endpoints: [gw-a:5001, gw-b:5001]
//     writeUserId: 0
//     tags:
//   - {name: pump1_pv, address: Pump_001.PV}
type MxGatewayConfig struct {
	mxsource.Config `yaml:",inline"`
	// Tags are the gateway items, by item address (Object.Attribute).
	Tags []bridge.TagConfig `yaml:"tags"`
}

// mxGatewaySourceYAML is the YAML form of a type: mxgateway source.
type mxGatewaySourceYAML struct {
	Name            string `yaml:"name"`
	Type            string `yaml:"type"`
	MxGatewayConfig `yaml:",inline"`
}

// opcuaSourceYAML is SourceConfig without its YAML method, so that decoding
// one does not recurse.
type opcuaSourceYAML SourceConfig

// UnmarshalYAML decodes a source by its type: the two types share field
// names (endpoints, mode) with different meanings. Unknown fields are
// errors, with their line, as everywhere in the config.
func (s *SourceConfig) UnmarshalYAML(n *yaml.Node) error {
	var head struct {
		Name string `yaml:"name"`
		Type string `yaml:"type"`
	}
	if err := n.Decode(&head); err != nil {
		return err
	}
	switch head.Type {
	case "", TypeOPCUA:
	case TypeMxGateway:
		var mx mxGatewaySourceYAML
		if err := strictDecode(n, &mx); err != nil {
			return err
		}
		*s = SourceConfig{Name: mx.Name, Type: mx.Type, MxGateway: mx.MxGatewayConfig}
		return nil
	default:
		// Validate names the type and the valid ones; the fields of an
		// unknown type mean nothing.
		*s = SourceConfig{Name: head.Name, Type: head.Type}
		return nil
	}
	var oc opcuaSourceYAML
	if err := strictDecode(n, &oc); err != nil {
		return err
	}
	*s = SourceConfig(oc)
	return nil
}

// validateMx checks a type: mxgateway source; f is its field path.
func (s SourceConfig) validateMx(f string, add func(string, ...any)) {
	for _, e := range Errors(s.MxGateway.Config.Validate()) {
		add("%s.%v", f, e)
	}
	if len(s.MxGateway.Tags) == 0 {
		add("%s.tags: a gateway source needs tags", f)
	}
	seen := map[string]bool{}
	for j, t := range s.MxGateway.Tags {
		tf := func() string { return fmt.Sprintf("%s.tags[%d]", f, j) }
		checkTag(tf, t, seen, add)
		if err := mxsource.ValidateAddress(t.Address); err != nil {
			add("%s.address: %v", tf(), err)
		}
	}
}
