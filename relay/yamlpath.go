package relay

import "strconv"

// yamlPath is the path of the node a walk of a config's YAML tree is at
// (sources[0].tags[5].subject), kept as its parts and written out only
// when a message needs it: the walks of a config of 10,000 tags visit
// some 30,000 nodes and report, as a rule, none.
type yamlPath struct {
	base  string // the path the walk started at ("" at the document)
	parts []yamlPathPart
}

// yamlPathPart is a field name, or a list index when field is "" and
// index is not negative.
type yamlPathPart struct {
	field string
	index int
}

// push adds a field; pop takes the last part off.
func (p *yamlPath) push(field string) {
	p.parts = append(p.parts, yamlPathPart{field: field, index: -1})
}

// pushIndex adds a list index.
func (p *yamlPath) pushIndex(i int) { p.parts = append(p.parts, yamlPathPart{index: i}) }

func (p *yamlPath) pop() { p.parts = p.parts[:len(p.parts)-1] }

// String is the path as fieldPath and "%s[%d]" write it.
func (p *yamlPath) String() string {
	s := p.base
	for _, part := range p.parts {
		if part.index >= 0 {
			s += "[" + strconv.Itoa(part.index) + "]"
			continue
		}
		s = fieldPath(s, part.field)
	}
	return s
}

// with is the path of field under the node the walk is at.
func (p *yamlPath) with(field string) string { return fieldPath(p.String(), field) }
