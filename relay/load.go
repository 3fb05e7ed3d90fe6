package relay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
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
	return Parse(data)
}

// Parse decodes a config strictly (an unknown field or a fractional
// integer is an error with its line), expands ${VAR} references in its
// values and validates it. All problems are reported at once (Errors
// splits them); no message shows a value that came from the environment.
func Parse(data []byte) (*Config, error) {
	return parse(data, os.LookupEnv)
}

func parse(data []byte, lookup func(string) (string, bool)) (*Config, error) {
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("config: the file is over %d MiB, the limit for a config file", MaxConfigSize>>20)
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return nil, fmt.Errorf("config: not a text file (a NUL byte at offset %d): want YAML", i)
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("config: not a text file (invalid UTF-8 at offset %d): want YAML in UTF-8", invalidUTF8(data))
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
	if errs := checkFields(doc, reflect.TypeOf(Config{}), ""); len(errs) > 0 {
		return nil, redact(errors.Join(errs...), subs)
	}
	var c Config
	if err := doc.Decode(&c); err != nil {
		return nil, redact(decodeErrors(err), subs)
	}
	if err := c.Validate(); err != nil {
		return nil, redact(err, subs)
	}
	return &c, nil
}

// decodeErrors splits the YAML decoder's list of type errors into one
// error each.
func decodeErrors(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("config: %w", err)
	}
	errs := make([]error, len(te.Errors))
	for i, e := range te.Errors {
		errs[i] = fmt.Errorf("config: %s", e)
	}
	return errors.Join(errs...)
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
