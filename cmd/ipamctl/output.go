package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// format is the -o flag: table (default), json or yaml.
type format string

const (
	formatTable format = ""
	formatJSON  format = "json"
	formatYAML  format = "yaml"
)

func parseFormat(s string) (format, error) {
	switch s {
	case "", "table", "wide":
		return formatTable, nil
	case "json":
		return formatJSON, nil
	case "yaml", "yml":
		return formatYAML, nil
	}
	return "", usageErrorf("-o %q: must be table, wide, json or yaml", s)
}

// emit writes v as JSON or YAML.
func emit(w io.Writer, f format, v any) error {
	data, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return err
	}
	if f == formatYAML {
		data, err = jsonToYAML(data)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

// table writes kubectl-like columns: upper-case headers, three spaces
// between columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)}
	t.row(headers...)
	return t
}

// row writes one line. A cell holding a rune that is not printable (a
// tab, a newline, an escape sequence: text from a store edited by hand)
// or bytes that are not UTF-8 is written quoted, as Go quotes it, so that
// it can neither forge a column or a line nor control the terminal.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		if !printable(c) {
			cells[i] = strconv.Quote(c)
		}
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// printable reports whether s is UTF-8 of printable runes and spaces only.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) })
}

func (t *table) flush() error { return t.tw.Flush() }

// age prints how long ago t was, as kubectl does: 45s, 12m, 5h, 3d.
func age(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// jsonToYAML converts a JSON document to YAML, keeping the key order. It
// writes block style, strings plain when YAML reads them back as the same
// string and double-quoted (JSON escapes are valid YAML) otherwise.
func jsonToYAML(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := parseNode(dec)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	switch {
	case n.isScalar():
		b.WriteString(n.scalar + "\n")
	default:
		for _, l := range n.lines(0) {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes(), nil
}

type node struct {
	object, array bool
	keys          []string
	vals          []*node
	scalar        string
}

func (n *node) isScalar() bool { return !n.object && !n.array }

func parseNode(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &node{object: t == '{', array: t == '['}
		for dec.More() {
			if n.object {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k.(string))
			}
			v, err := parseNode(dec)
			if err != nil {
				return nil, err
			}
			n.vals = append(n.vals, v)
		}
		if _, err := dec.Token(); err != nil { // closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		return &node{scalar: yamlString(t)}, nil
	case json.Number:
		return &node{scalar: t.String()}, nil
	case bool:
		return &node{scalar: fmt.Sprint(t)}, nil
	case nil:
		return &node{scalar: "null"}, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// lines renders a collection at indent.
func (n *node) lines(indent int) []string {
	pad := strings.Repeat(" ", indent)
	var out []string
	if n.object {
		if len(n.keys) == 0 {
			return []string{pad + "{}"}
		}
		for i, k := range n.keys {
			v := n.vals[i]
			key := pad + yamlString(k) + ":"
			switch {
			case v.isScalar():
				out = append(out, key+" "+v.scalar)
			case len(v.vals) == 0 && v.object:
				out = append(out, key+" {}")
			case len(v.vals) == 0:
				out = append(out, key+" []")
			case v.array:
				out = append(out, key)
				out = append(out, v.lines(indent)...) // kubectl style: "- " at the key's indent
			default:
				out = append(out, key)
				out = append(out, v.lines(indent+2)...)
			}
		}
		return out
	}
	if len(n.vals) == 0 {
		return []string{pad + "[]"}
	}
	for _, v := range n.vals {
		if v.isScalar() {
			out = append(out, pad+"- "+v.scalar)
			continue
		}
		sub := v.lines(indent + 2)
		sub[0] = pad + "- " + strings.TrimLeft(sub[0], " ")
		out = append(out, sub...)
	}
	return out
}

// yamlString returns s as a YAML scalar that reads back as the string s.
func yamlString(s string) string {
	if plainSafe(s) {
		return s
	}
	b, _ := json.Marshal(s)
	// JSON's escapes are YAML's, but JSON leaves some runes raw that YAML
	// may not hold (DEL, the C1 controls, U+FFFE, U+FFFF) or reads as a
	// line break (U+0085) or a byte order mark (U+FEFF).
	q := string(b)
	if !strings.ContainsFunc(q, yamlMustEscape) {
		return q
	}
	var out strings.Builder
	for _, r := range q {
		if yamlMustEscape(r) {
			fmt.Fprintf(&out, "\\u%04X", r)
			continue
		}
		out.WriteRune(r)
	}
	return out.String()
}

func yamlMustEscape(r rune) bool {
	return r >= 0x7f && r <= 0x9f || r == 0xfeff || r == 0xfffe || r == 0xffff
}

func plainSafe(s string) bool {
	if s == "" || s[len(s)-1] == ' ' || s[len(s)-1] == ':' {
		return false
	}
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "y", "n", "null", "~":
		return false
	}
	c := s[0]
	if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '/') {
		return false // digits (numbers, times), indicators, quotes, spaces
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("._/-,()'=;", c) >= 0:
		case c == ' ':
			if s[i+1] == '#' || s[i+1] == ' ' {
				return false
			}
		case c == ':':
			if s[i+1] == ' ' {
				return false
			}
		default:
			return false
		}
	}
	return true
}
