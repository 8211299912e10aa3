package main

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// FuzzYAMLOutput: -o yaml says the same as -o json. Any JSON value, as
// encoding/json writes it (how emit gets it), converted by jsonToYAML and
// read back by a YAML parser (sigs.k8s.io/yaml, as kubectl's), is the same
// value; and a string scalar yamlString writes reads back as the string,
// as a value and as a key.
func FuzzYAMLOutput(f *testing.F) {
	for _, s := range []string{
		`{"items":[{"name":"kubernetes","cidrs":["10.96.0.0/28"],"terminating":false}]}`,
		`{"a":"yes","b":"No","c":"~","d":"null","e":"1.5","f":"0x10","g":"a: b","h":"a #b","i":"-x","j":"","k":" x"}`,
		`[[],{},[[1]],[{"a":[]}],null,true,1e3,-0.5]`,
		`{"x":{"y":{"z":["a","b",{"c":"d"}]}}}`,
		`"plain"`, `"y"`, `"services/default/web"`, `"2001:db8::1"`, `"a'b"`, `"a=b"`, `"<&>"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var v any
		if json.Unmarshal([]byte(in), &v) != nil {
			if json.Unmarshal([]byte(`"`+in+`"`), &v) != nil {
				return
			}
		}
		doc, err := json.Marshal(v)
		if err != nil {
			return
		}
		if longKey(v) {
			// YAML limits an implicit key to 1024 characters; the keys
			// ipamctl prints are its own field and label names.
			return
		}
		y, err := jsonToYAML(doc)
		if err != nil {
			t.Fatalf("jsonToYAML(%s): %v", doc, err)
		}
		back, err := yaml.YAMLToJSON(y)
		if err != nil {
			t.Fatalf("jsonToYAML(%s) =\n%s\nwhich is not YAML: %v", doc, y, err)
		}
		var got any
		if err := json.Unmarshal(back, &got); err != nil {
			t.Fatalf("YAMLToJSON gave %s: %v", back, err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Fatalf("JSON %s\nas YAML:\n%s\nreads back as %s", doc, y, back)
		}
		if s, ok := v.(string); ok && utf8.RuneCountInString(yamlString(s)) <= maxYAMLKey {
			var m map[string]string
			line := yamlString(s) + ": " + yamlString(s)
			if err := yaml.Unmarshal([]byte(line), &m); err != nil || len(m) != 1 || m[s] != s {
				t.Fatalf("yamlString(%q): %s reads back as %q, %v", s, line, m, err)
			}
		}
	})
}

// TestYAMLQuotesWhatYAMLCannotHoldRaw: a string holding DEL or a C1 control
// was written double-quoted, as JSON writes it, with the character raw;
// YAML refuses it there, so -o yaml printed a document no YAML parser
// reads, or, for NEL, one that read back with a space in its place. Such
// a value passes no name validation, but a store written without the
// allocator holds any owner bytes.
func TestYAMLQuotesWhatYAMLCannotHoldRaw(t *testing.T) {
	for _, s := range []string{"a\x7fb", "a\u0080b", "a\u0085b", "\u009f", "\ufffe"} {
		line := "k: " + yamlString(s)
		var m map[string]string
		if err := yaml.Unmarshal([]byte(line), &m); err != nil || m["k"] != s {
			t.Errorf("yamlString(%q) = %q, which reads back as %q, %v", s, yamlString(s), m["k"], err)
		}
	}
}

// maxYAMLKey is YAML's limit on an implicit key, in characters.
const maxYAMLKey = 1024

// longKey reports whether a JSON value holds an object key that, as
// yamlString writes it, is longer than YAML allows an implicit key.
func longKey(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if utf8.RuneCountInString(yamlString(k)) > maxYAMLKey || longKey(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if longKey(e) {
				return true
			}
		}
	}
	return false
}
