package relay

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// checkFields walks a parsed document against the Go type it decodes into
// and reports what the YAML decoder lets through or reports without the
// field's path: unknown fields (with the valid ones) and fractional
// values in integer fields (which the decoder silently truncates). Each
// error names the line and the field. The walk reads the node tree as
// parsed, so lines are the file's own.
func checkFields(n *yaml.Node, t reflect.Type, path string) []error {
	var errs []error
	// The fields of each type, worked out once per call: a config of
	// 10,000 tags has 10,000 tags of one type.
	known := map[reflect.Type]map[string]reflect.Type{}
	p := &yamlPath{base: path}
	var walk func(n *yaml.Node, t reflect.Type)
	walk = func(n *yaml.Node, t reflect.Type) {
		for n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
			n = n.Content[0]
		}
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == sourceConfigType {
			if t = sourceYAMLType(n); t == nil {
				return // an unknown type: Validate names it
			}
		} else if reflect.PointerTo(t).Implements(unmarshalerType) {
			return
		}
		switch t.Kind() {
		case reflect.Struct:
			if n.Kind != yaml.MappingNode || t == timeType {
				return
			}
			fields, ok := known[t]
			if !ok {
				fields = yamlFields(t)
				known[t] = fields
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if k.Value == "<<" && k.ShortTag() == "!!merge" {
					walk(v, t)
					continue
				}
				ft, ok := fields[k.Value]
				if !ok {
					errs = append(errs, fmt.Errorf("config: line %d: %s: unknown field (valid here: %s)",
						k.Line, p.with(k.Value), strings.Join(fieldNames(fields), ", ")))
					continue
				}
				p.push(k.Value)
				walk(v, ft)
				p.pop()
			}
		case reflect.Slice, reflect.Array:
			if n.Kind != yaml.SequenceNode {
				return
			}
			for i, c := range n.Content {
				p.pushIndex(i)
				walk(c, t.Elem())
				p.pop()
			}
		case reflect.Map:
			if n.Kind != yaml.MappingNode {
				return
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				p.push(n.Content[i].Value)
				walk(n.Content[i+1], t.Elem())
				p.pop()
			}
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if n.Kind != yaml.ScalarNode || t == durationType || n.ShortTag() != "!!float" {
				return
			}
			f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
			if err != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
				errs = append(errs, fmt.Errorf("config: line %d: %s: %s is not a whole number", n.Line, p, n.Value))
			}
		}
	}
	walk(n, t)
	return errs
}

var (
	sourceConfigType = reflect.TypeOf(SourceConfig{})
	unmarshalerType  = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
	durationType     = reflect.TypeOf(time.Duration(0))
	timeType         = reflect.TypeOf(time.Time{})
)

// sourceYAMLType is the type a source's node decodes into, by its type
// field; nil for an unknown type.
func sourceYAMLType(n *yaml.Node) reflect.Type {
	var head struct {
		Type string `yaml:"type"`
	}
	_ = n.Decode(&head) // a bad type field is reported by the walk
	switch head.Type {
	case "", TypeOPCUA:
		return reflect.TypeOf(opcuaSourceYAML{})
	case TypeMxGateway:
		return reflect.TypeOf(mxGatewaySourceYAML{})
	}
	return nil
}

// yamlFields maps the YAML names of t's fields, inline ones included, to
// their types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range yamlFields(ft) {
					out[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

func fieldNames(fields map[string]reflect.Type) []string {
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// fieldPath is the path of field under path: "nats" and "servers" make
// "nats.servers".
func fieldPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// strictDecode decodes n into v refusing unknown fields and fractional
// integers, which a node's own Decode lets through; errors carry the
// file's line numbers.
func strictDecode(n *yaml.Node, v any) error {
	if errs := checkFields(n, reflect.TypeOf(v), ""); len(errs) > 0 {
		return errors.Join(errs...)
	}
	return n.Decode(v)
}

// standardTags are the YAML tags a config may carry: the core schema's,
// which decode as YAML defines them. Any other (!Ref, !include, !env, a
// typo of !!str) would be dropped by the decoder, and the value taken as
// it is written: the file would mean something else than its author
// thinks.
var standardTags = map[string]bool{
	"!!str": true, "!!int": true, "!!float": true, "!!bool": true, "!!null": true,
	"!!map": true, "!!seq": true, "!!binary": true, "!!timestamp": true, "!!merge": true,
}

// checkTags reports every node, key or value, that carries a YAML tag
// outside standardTags, with its line and path.
func checkTags(doc *yaml.Node) []error {
	var errs []error
	p := &yamlPath{}
	report := func(n *yaml.Node, what string) {
		if n.Kind == yaml.AliasNode || n.Kind == yaml.DocumentNode || standardTags[n.ShortTag()] {
			return
		}
		path := p.String()
		if path == "" {
			path = "the document"
		}
		errs = append(errs, fmt.Errorf("config: line %d: %s: the YAML tag %s on its %s means nothing to the relay (it would be ignored); write the plain value",
			n.Line, path, n.Tag, what))
	}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		report(n, "value")
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				p.push(k.Value)
				report(k, "key")
				walk(n.Content[i+1])
				p.pop()
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p.pushIndex(i)
				walk(c)
				p.pop()
			}
		}
	}
	walk(doc)
	return errs
}
