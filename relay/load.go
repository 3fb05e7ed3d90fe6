package relay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// MaxConfigSize is the largest config file Load and Parse accept: far
// above any real relay's (a thousand tags take about 100 KiB), far below
// what could hurt the process.
const MaxConfigSize = 4 << 20

// Load reads, expands and checks a config file. A directory, a file over
// MaxConfigSize, an empty file and binary data are each refused with one
// line saying so.
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data)
}

// ReadFile reads a config file as Load does, for Parse or
// Relay.ApplyYAML: a directory is refused, and no more than one byte past
// MaxConfigSize is read (Parse refuses the file then).
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("config: %s is a directory, not a config file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	return data, nil
}

// Parse decodes a config strictly (an unknown field, a fractional
// integer or a YAML tag outside the standard ones is an error with its
// line), expands ${VAR} references in its values and validates it. All problems are reported at once (Errors
// splits them); no message shows a value that came from the environment.
func Parse(data []byte) (*Config, error) {
	return parse(data, os.LookupEnv)
}

func parse(data []byte, lookup func(string) (string, bool)) (*Config, error) {
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("config: the file is over %d MiB, the limit for a config file", MaxConfigSize>>20)
	}
	if bytes.HasPrefix(data, []byte{0xFF, 0xFE}) || bytes.HasPrefix(data, []byte{0xFE, 0xFF}) {
		return nil, errors.New("config: not a text file in UTF-8 (UTF-16 byte order mark): save it as UTF-8")
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return nil, fmt.Errorf("config: not a text file (a NUL byte at offset %d): want YAML", i)
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("config: not a text file (invalid UTF-8 at offset %d): want YAML in UTF-8", invalidUTF8(data))
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("config: the file is empty (want at least nats and sources)")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("config: the file is empty (want at least nats and sources)")
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := next.Line
		if err != nil {
			return nil, fmt.Errorf("config: after the first document: %w", err)
		}
		return nil, fmt.Errorf("config: line %d: a second YAML document: a config file holds one", line)
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	switch {
	case doc.Kind == yaml.ScalarNode && doc.ShortTag() == "!!null":
		return nil, errors.New("config: the file is empty (want at least nats and sources)")
	case doc.Kind != yaml.MappingNode:
		return nil, fmt.Errorf("config: line %d: the file is a %s; want a mapping of fields (instance, nats, sources, ...)", doc.Line, kindName(doc))
	}
	subs, err := expandEnv(doc, lookup)
	if err != nil {
		return nil, err // names lines and variables, never values
	}
	if errs := append(checkFields(doc, reflect.TypeOf(Config{}), ""), checkTags(doc)...); len(errs) > 0 {
		return nil, redact(errors.Join(errs...), subs)
	}
	// A field written with its zero value would silently take the
	// default (explicit.go); these are reported with the rest.
	errs := checkWrittenZeros(doc)
	var c Config
	if err := doc.Decode(&c); err != nil {
		return nil, redact(errors.Join(append(errs, Errors(decodeErrors(err, doc))...)...), subs)
	}
	errs = append(errs, c.unusedSections(doc)...)
	if err := errors.Join(append(errs, Errors(c.Validate())...)...); err != nil {
		return nil, redact(err, subs)
	}
	c.subs = subs
	return &c, nil
}

// decodeErrors splits the YAML decoder's list of type errors into one
// error each, with the path of the field each is about: the decoder gives
// only the line.
func decodeErrors(err error, doc *yaml.Node) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("config: %w", err)
	}
	paths := nodePaths(doc)
	errs := make([]error, len(te.Errors))
	for i, e := range te.Errors {
		if m := typeErr.FindStringSubmatch(e); m != nil {
			line, _ := strconv.Atoi(m[1])
			if p := pathOf(paths[line], m[2], m[3]); p != "" {
				e = fmt.Sprintf("line %s: %s: %s", m[1], p, strings.TrimPrefix(e, "line "+m[1]+": "))
			}
		}
		errs[i] = fmt.Errorf("config: %s", e)
	}
	return errors.Join(errs...)
}

var typeErr = regexp.MustCompile("^line (\\d+): cannot unmarshal (!!\\w+)(?: `([^`]*)`)? into ")

type nodePath struct {
	path string
	n    *yaml.Node
}

// nodePaths lists the value nodes of the tree by line, with their field
// paths (sources[0].tags[1].name).
func nodePaths(doc *yaml.Node) map[int][]nodePath {
	out := map[int][]nodePath{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		if path != "" {
			out[n.Line] = append(out[n.Line], nodePath{path, n})
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], fieldPath(path, n.Content[i].Value))
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	walk(doc, "")
	return out
}

// pathOf picks the node a type error is about among those on its line:
// the first (outermost) with the error's tag and value (the decoder shows 7 bytes and
// "..." of a longer value).
func pathOf(cands []nodePath, tag, value string) string {
	for _, c := range cands {
		if c.n.ShortTag() != tag {
			continue
		}
		if value != "" {
			v := c.n.Value
			if short, ok := strings.CutSuffix(value, "..."); !(v == value || ok && len(v) > 10 && strings.HasPrefix(v, short)) {
				continue
			}
		}
		return c.path
	}
	return ""
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "single value (" + n.ShortTag() + ")"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}

func invalidUTF8(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(data)
}
