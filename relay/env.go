package relay

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// envRef is ${NAME} or ${NAME:-default}.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expandEnv replaces ${NAME} with the environment variable, so secrets can
// stay out of the file. An unset variable without a default is an error.
// Comments are left alone, so a file can explain the syntax; lines keep
// their numbers, so decoding errors point at the right line.
func expandEnv(data []byte) ([]byte, error) {
	var missing []string
	lines := bytes.SplitAfter(data, []byte("\n"))
	for i, line := range lines {
		code, comment := splitComment(line)
		lines[i] = append(expandLine(code, &missing), comment...)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("environment variables not set: %s", strings.Join(missing, ", "))
	}
	return bytes.Join(lines, nil), nil
}

// splitComment cuts a YAML line at a comment: a '#' at the start of the
// line or after a space, outside quotes.
func splitComment(line []byte) (code, comment []byte) {
	var quote byte
	for i, c := range line {
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i], line[i:]
		}
	}
	return line, nil
}

func expandLine(data []byte, missing *[]string) []byte {
	return envRef.ReplaceAllFunc(data, func(m []byte) []byte {
		sub := envRef.FindSubmatch(m)
		name := string(sub[1])
		if v, ok := os.LookupEnv(name); ok {
			return []byte(v)
		}
		if len(sub[2]) > 0 {
			return sub[3]
		}
		*missing = append(*missing, name)
		return m
	})
}
