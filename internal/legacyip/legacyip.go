// Package legacyip reads the address spellings that the legacy parsers
// accepted and net/netip refuses: Go 1.16's net.ParseIP, and Kubernetes'
// ParseIPSloppy, a copy of it, read a dotted-decimal field with leading
// zeros as decimal ("010.1.2.3" is 10.1.2.3) and an IPv6 group with any
// number of leading zeros ("fd00::00005" is fd00::5).
package legacyip

import "strings"

// WithoutLeadingZeros returns s with the leading zeros removed from every
// field of its dotted-decimal IPv4 part (all of s, or what follows the
// last ':') and from every group of its IPv6 part. It returns false when a
// field is not decimal digits or a group not hex digits, or one stays too
// long once stripped (over three digits, or four), which the legacy
// parsers refused too. Whether the result is an address is for netip to
// say; a zone, which they refused, makes it false.
func WithoutLeadingZeros(s string) (string, bool) {
	head, tail := "", s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		head, tail = s[:i+1], s[i+1:]
		if strings.IndexByte(tail, '.') < 0 {
			head, tail = s, "" // IPv6 with no IPv4 part
		}
	}
	var b strings.Builder
	b.Grow(len(s))
	if head != "" {
		for i, g := range strings.Split(head, ":") {
			if i > 0 {
				b.WriteByte(':')
			}
			if g == "" { // around "::", or before the IPv4 part
				continue
			}
			if strings.Trim(g, "0123456789abcdefABCDEF") != "" {
				return "", false
			}
			g = stripZeros(g)
			if len(g) > 4 {
				return "", false
			}
			b.WriteString(g)
		}
	}
	if tail == "" {
		return b.String(), true
	}
	fields := strings.Split(tail, ".")
	if len(fields) != 4 {
		return "", false
	}
	for i, f := range fields {
		if f == "" || strings.Trim(f, "0123456789") != "" {
			return "", false
		}
		f = stripZeros(f)
		if len(f) > 3 { // over 255 whatever the digits
			return "", false
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(f)
	}
	return b.String(), true
}

// stripZeros removes the leading zeros of a non-empty number, keeping one
// digit.
func stripZeros(n string) string {
	if n = strings.TrimLeft(n, "0"); n == "" {
		return "0"
	}
	return n
}
