package main

import (
	"strings"
	"testing"
)

// An endpoint reached in plain text that serves TLS is said to serve it,
// with advice that works: an http:// endpoint is plain text whatever the
// TLS flags (README: a bare HOST:PORT only is made TLS by them), so it is
// told to be named https://, never to "give --etcd-cacert", which changes
// nothing for it (and may well be given already). A bare HOST:PORT may be
// told either. TLS flags with an http:// endpoint to a plain etcd work,
// and https:// to a plain etcd fails naming TLS.
func TestTheAdviceForAnHTTPEndpointServingTLSWorks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	p := newTestPKI(t)
	tlsHost := startTLSEtcd(t, p)
	plain := startEtcd(t)
	flags := []string{"--etcd-cacert", p.ca, "--etcd-cert", p.clientCert, "--etcd-key", p.clientKey}
	for _, tc := range []struct {
		what        string
		store       []string
		code        int
		want, never string
	}{
		{"http:// to a plain etcd, TLS flags", append([]string{"--etcd", "http://" + plain}, flags...), 0, "", ""},
		{"http:// to a TLS etcd, TLS flags", append([]string{"--etcd", "http://" + tlsHost}, flags...), exitError, "https://" + tlsHost, "give --etcd-cacert"},
		{"http:// to a TLS etcd", []string{"--etcd", "http://" + tlsHost}, exitError, "https://" + tlsHost, "give --etcd-cacert"},
		{"HOST:PORT to a TLS etcd", []string{"--etcd", tlsHost}, exitError, "https://" + tlsHost, ""},
		{"https:// to a plain etcd, TLS flags", append([]string{"--etcd", "https://" + plain}, flags...), exitError, "TLS", ""},
	} {
		r := (&cli{t: t, store: tc.store}).run("cidr", "get", "--timeout", "20s")
		t.Logf("%s: exit %d: %s", tc.what, r.code, strings.TrimSpace(r.stderr))
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || tc.never != "" && strings.Contains(r.stderr, tc.never) {
			t.Errorf("%s: exit %d, want %d, saying %q and not %q: %s", tc.what, r.code, tc.code, tc.want, tc.never, r.stderr)
		}
	}
}
