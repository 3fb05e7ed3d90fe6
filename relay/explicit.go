package relay

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The config's Go types take a field's zero value for "not given, use the
// default": a library caller leaves a field out by leaving it zero. A file
// can say more: a field written with its zero value (fleet.leaseTTL: 0s,
// service.prefix: "", jetstream.replicas: 0, an empty ${VAR}) is a value
// the author chose, and taking the default for it would run the relay on
// a setting nobody wrote. Parse refuses those, naming the field, the
// allowed values and the default that leaving it out gives.
//
// The fields below are the ones whose zero value is not a value of their
// own. Fields whose zero is documented as a meaning are not among them:
// http.listen "" (no listener), writeUserId 0 (supervisory sessions), the
// stream limits (maxAge, maxBytes, ... 0: no limit), security.mode ""
// (with policy auto), browse maxDepth and maxNodes (0: 10 and 10000), the
// credentials (empty: none), and the pointer fields of a source, which
// tell a written zero apart and check it against their own range.

// zeroKind is how a field's written value is read to tell whether it is
// zero.
type zeroKind int

const (
	zeroString zeroKind = iota
	zeroInt
	zeroDuration
	zeroList
)

// zeroRule is a field whose written zero is refused: the values it
// allows, and the default it takes when left out.
type zeroRule struct {
	kind  zeroKind
	valid string
	def   string
	// only limits the rule to sources of this type (where the other type
	// has a field of the name with its own rules).
	only string
}

// zeroRules are keyed by field path with list indices left out
// (sources[].tags[].subject).
var zeroRules = map[string]zeroRule{
	"instance":                          {kind: zeroString, valid: "a name for the relay's status, logs and connection name", def: "apbridge"},
	"logLevel":                          {kind: zeroString, valid: "debug, info, warn, error", def: "info"},
	"subject":                           {kind: zeroString, valid: "a subject template such as plant.{source}.{tag}", def: "apbridge.{source}.{tag}"},
	"sink":                              {kind: zeroString, valid: "core, jetstream", def: "core"},
	"nats.name":                         {kind: zeroString, valid: "a connection name", def: "apbridge-<instance>"},
	"service.prefix":                    {kind: zeroString, valid: "a subject such as plant.site1, of this relay's tags alone", def: "apbridge, shared by every relay that leaves it out"},
	"service.name":                      {kind: zeroString, valid: "letters, digits, '-' and '_', 1-64 characters", def: "apbridge"},
	"subscribe.retryFloor":              {kind: zeroDuration, valid: "10ms-1h", def: "5s"},
	"subscribe.retryCeiling":            {kind: zeroDuration, valid: "retryFloor-24h", def: "60s"},
	"subscribe.inFlightCeiling":         {kind: zeroDuration, valid: "10ms-24h", def: "45s"},
	"jetstream.stream":                  {kind: zeroString, valid: "1-255 characters, none of . * > / \\, spaces or control characters", def: "APBRIDGE"},
	"jetstream.domain":                  {kind: zeroString, valid: "letters, digits, '-' and '_', 1-64 characters", def: "none: the JetStream of the servers the relay is connected to"},
	"edge.checkInterval":                {kind: zeroDuration, valid: "1s-1h", def: "30s"},
	"edge.rateWindow":                   {kind: zeroDuration, valid: "1s-24h", def: "1m"},
	"jetstream.subjects":                {kind: zeroList, valid: "subject patterns that capture every tag subject", def: "worked out from the tags at the start"},
	"jetstream.replicas":                {kind: zeroInt, valid: "1-5", def: "3"},
	"jetstream.storage":                 {kind: zeroString, valid: "file, memory", def: "file"},
	"jetstream.retention":               {kind: zeroString, valid: "limits, interest, workqueue", def: "limits"},
	"jetstream.discard":                 {kind: zeroString, valid: "old, new", def: "old"},
	"jetstream.duplicateWindow":         {kind: zeroDuration, valid: "100ms-24h", def: "2m"},
	"jetstream.maxPending":              {kind: zeroInt, valid: "1-1000000", def: "4096"},
	"jetstream.maxPendingBytes":         {kind: zeroInt, valid: "1024-1073741824", def: "16777216 (16 MiB)"},
	"jetstream.ackTimeout":              {kind: zeroDuration, valid: "100ms-1m", def: "2s"},
	"jetstream.healthInterval":          {kind: zeroDuration, valid: "100ms-10m", def: "5s"},
	"jetstream.rttWarning":              {kind: zeroDuration, valid: "above 0 up to rttCritical", def: "250ms"},
	"jetstream.rttCritical":             {kind: zeroDuration, valid: "above 0 up to 1m", def: "1s"},
	"jetstream.replicaLagCritical":      {kind: zeroInt, valid: "1 or more operations", def: "100000"},
	"jetstream.replicaSeenCritical":     {kind: zeroDuration, valid: "1s-1h", def: "10s"},
	"fleet.bucket":                      {kind: zeroString, valid: "letters, digits, '-', '_', '='", def: "apbridge_fleet"},
	"fleet.leaseTTL":                    {kind: zeroDuration, valid: "whole seconds, 1s-60s", def: "3s"},
	"fleet.replicas":                    {kind: zeroInt, valid: "1-5", def: "3"},
	"fleet.dwell":                       {kind: zeroDuration, valid: "above 0 up to 10m", def: "leaseTTL"},
	"fleet.overlap":                     {kind: zeroDuration, valid: "above 0 up to leaseTTL, or negative to turn it off", def: "1s, or leaseTTL if shorter"},
	"sources[].mode":                    {kind: zeroString, valid: "warm, hot, prepared (a gateway source: warm, hot)", def: "warm"},
	"sources[].security.policy":         {kind: zeroString, valid: "None, Basic256Sha256, Aes128_Sha256_RsaOaep, Aes256_Sha256_RsaPss, auto", def: "None"},
	"sources[].security.applicationUri": {kind: zeroString, valid: "a URI such as urn:plant:relay1", def: "urn:apbridge:<hostname>"},
	"sources[].tags[].subject":          {kind: zeroString, valid: "a subject such as plant.line1.temp", def: "the subject template's"},
	"sources[].groups[].tags[].subject": {kind: zeroString, valid: "a subject such as plant.line1.temp", def: "the subject template's"},
	"sources[].commandTimeout":          {kind: zeroDuration, valid: "1s-10m", def: "60s", only: TypeMxGateway},
	"sources[].subscribeParallelism":    {kind: zeroInt, valid: "1-128", def: "16", only: TypeMxGateway},
	"sources[].subscribeBatchSize":      {kind: zeroInt, valid: "1-10000", def: "1000", only: TypeMxGateway},
	"sources[].probeInterval":           {kind: zeroDuration, valid: "100ms-1m", def: "2s", only: TypeMxGateway},
	"sources[].probeTimeout":            {kind: zeroDuration, valid: "100ms-10m", def: "5s", only: TypeMxGateway},
	"sources[].heartbeatTimeout":        {kind: zeroDuration, valid: "100ms-10m, at least 2 heartbeat intervals", def: "3 heartbeat intervals, at least 1s", only: TypeMxGateway},
	"sources[].reconnectDelay":          {kind: zeroDuration, valid: "10ms-1m", def: "1s", only: TypeMxGateway},
	"sources[].clientName":              {kind: zeroString, valid: "a name for the gateway's logs", def: "apbridge", only: TypeMxGateway},
	"sources[].tls.serverName":          {kind: zeroString, valid: "the name the gateways' certificates carry", def: "the endpoint's host", only: TypeMxGateway},
}

// zeroTree is zeroRules as a tree of field names, which the walk of
// checkWrittenZeros follows: it descends only where a rule lies below,
// not into each of 10,000 tags' fields. Built once, never changed.
var zeroTree = buildZeroTree(zeroRules)

// zeroNode is a node of zeroTree: the rule of the field it stands for,
// the fields below it and, for a list, its elements' node. source marks
// the elements of sources, whose type the "only" of a rule reads.
type zeroNode struct {
	rule   *zeroRule
	fields map[string]*zeroNode
	elem   *zeroNode
	source bool
}

func buildZeroTree(rules map[string]zeroRule) *zeroNode {
	root := &zeroNode{}
	for key, r := range rules {
		n := root
		for _, seg := range strings.Split(key, ".") {
			name, list := strings.CutSuffix(seg, "[]")
			if n.fields == nil {
				n.fields = map[string]*zeroNode{}
			}
			if n.fields[name] == nil {
				n.fields[name] = &zeroNode{}
			}
			n = n.fields[name]
			if list {
				if n.elem == nil {
					n.elem = &zeroNode{source: n == root.fields["sources"]}
				}
				n = n.elem
			}
		}
		n.rule = &r
	}
	return root
}

// checkWrittenZeros walks the parsed document and reports every field of
// zeroRules written with its zero value (or with nothing: "leaseTTL:").
// Values that do not decode are left to the decoder, which names them.
func checkWrittenZeros(doc *yaml.Node) []error {
	var errs []error
	// path names the field (sources[1].tags[0].subject), z its place in
	// zeroTree (sources[].tags[].subject).
	path := &yamlPath{}
	var walk func(n *yaml.Node, z *zeroNode, srcType string)
	walk = func(n *yaml.Node, z *zeroNode, srcType string) {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		if r := z.rule; r != nil && (r.only == "" || r.only == srcType) {
			if what, zero := writtenZero(n, r.kind); zero {
				errs = append(errs, fmt.Errorf("config: line %d: %s: %s (valid: %s); leave the field out for the default, %s",
					n.Line, path, what, r.valid, r.def))
			}
			return
		}
		switch n.Kind {
		case yaml.MappingNode:
			if len(z.fields) == 0 {
				return
			}
			if z.source {
				srcType = yamlSourceType(n)
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if k.Value == "<<" && k.ShortTag() == "!!merge" {
					// A merge's fields are the mapping's own.
					for _, m := range append([]*yaml.Node{v}, mergeList(v)...) {
						if m.Kind != yaml.SequenceNode {
							walk(m, z, srcType)
						}
					}
					continue
				}
				if c := z.fields[k.Value]; c != nil {
					path.push(k.Value)
					walk(v, c, srcType)
					path.pop()
				}
			}
		case yaml.SequenceNode:
			if z.elem == nil {
				return
			}
			for i, c := range n.Content {
				path.pushIndex(i)
				walk(c, z.elem, srcType)
				path.pop()
			}
		}
	}
	walk(doc, zeroTree, "")
	return errs
}

// mergeList is the mappings of a merge given as a list (<<: [*a, *b]).
func mergeList(v *yaml.Node) []*yaml.Node {
	if v.Kind != yaml.SequenceNode {
		return nil
	}
	return v.Content
}

// yamlSourceType is a source node's type field, "" when absent.
func yamlSourceType(n *yaml.Node) string {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "type" {
			return n.Content[i+1].Value
		}
	}
	return ""
}

// writtenZero reports whether n holds kind's zero value or nothing, and
// says what it holds. A value is shown quoted, so that one from the
// environment is shown as its reference (see redact).
func writtenZero(n *yaml.Node, kind zeroKind) (string, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return "no value is given", true
	}
	switch kind {
	case zeroList:
		return "[] is empty", n.Kind == yaml.SequenceNode && len(n.Content) == 0
	case zeroString:
		return `"" is empty`, n.Kind == yaml.ScalarNode && n.Value == ""
	case zeroInt:
		var v int64
		if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
			return "", false
		}
		return strconv.Quote(n.Value) + " is out of range", v == 0
	case zeroDuration:
		var d time.Duration
		if n.Kind != yaml.ScalarNode || n.Decode(&d) != nil {
			return "", false
		}
		return strconv.Quote(n.Value) + " is out of range", d == 0
	}
	return "", false
}
