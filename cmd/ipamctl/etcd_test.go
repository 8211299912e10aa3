package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startEtcd starts one embedded etcd member on loopback for the test and
// returns its client endpoint as host:port.
func startEtcd(t *testing.T) string {
	t.Helper()
	return startMember(t, "ipamctl-test", nil)
}

// startMember starts one embedded etcd member named name on two free
// loopback ports, serving its clients over TLS with tlsInfo if given, and
// returns its client host:port.
func startMember(t *testing.T, name string, tlsInfo *transport.TLSInfo) string {
	t.Helper()
	return startMemberOn(t, name, "127.0.0.1", tlsInfo)
}

// startMemberOn is startMember on the address ip (127.0.0.1, ::1).
func startMemberOn(t *testing.T, name, ip string, tlsInfo *transport.TLSInfo) string {
	t.Helper()
	var hosts [2]string
	var ls []net.Listener
	for i := range hosts {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		hosts[i] = l.Addr().String()
	}
	for _, l := range ls { // hold both until both are chosen, then free them for etcd
		l.Close()
	}
	client := url.URL{Scheme: "http", Host: hosts[0]}
	peer := url.URL{Scheme: "http", Host: hosts[1]}
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = t.TempDir()
	// bcrypt's least cost (bcrypt.MinCost): each authentication hashes
	// the password, which at the default cost takes seconds of a loaded
	// machine's CPU under -race, past the tests' dial timeouts.
	cfg.BcryptCost = 4
	if tlsInfo != nil {
		client.Scheme = "https"
		cfg.ClientTLSInfo = *tlsInfo
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "fatal"
	cfg.UnsafeNoFsync = true
	return startEmbedded(t, cfg, client.Host)
}

func startEmbedded(t *testing.T, cfg *embed.Config, host string) string {
	t.Helper()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("etcd not ready after 60s")
	}
	return host
}

// The same walkthrough against etcd: two ipamctl processes' worth of
// commands share the cluster, and a second key prefix shares nothing.
func TestWalkthroughAgainstEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	ep := startEtcd(t)
	c := &cli{t: t, store: []string{"--etcd", ep + ",", "--etcd-prefix", "/ipamctl-test"}}
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/28")
	c.ok("ip", "allocate", "10.96.0.1", "--parent", "services/default/kubernetes")
	for i := range 13 {
		c.allocateNext(fmt.Sprintf("services/default/svc-%d", i))
	}
	c.fail(exitFull, "range is full", "ip", "allocate", "--family", "4", "--parent", "services/default/svc-14")
	c.ok("cidr", "create", "newcidr1", "192.96.0.0/24")
	a := c.allocateNext("services/default/new")
	if !strings.HasPrefix(a.String(), "192.96.0.") {
		t.Fatalf("allocation after newcidr1: %s", a)
	}
	r := c.run("cidr", "delete", "newcidr1")
	if r.code != exitPending || !strings.Contains(r.stdout, "Terminating") {
		t.Fatalf("cidr delete: %+v", r)
	}
	c.ok("ip", "release", a.String())
	c.fail(exitNotFound, "not found", "cidr", "get", "newcidr1")

	other := &cli{t: t, store: []string{"--etcd", ep, "--etcd-prefix", "/elsewhere"}}
	var cidrs list[cidrObject]
	other.json(&cidrs, "cidr", "get")
	if len(cidrs.Items) != 0 {
		t.Errorf("another prefix sees %v", cidrs.Items)
	}
}

// A CIDR whose value in etcd cannot be read (edited by hand) is left out
// by the store, which serves nothing from it: ipamctl goes on with the
// others and says, on stderr, which key it left out, with or without -v.
func TestACorruptCIDRInEtcdIsLeftOutAndSaidSo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	ep := startEtcd(t)
	c := &cli{t: t, store: []string{"--etcd", ep, "--etcd-prefix", "/ipamctl-test"}}
	c.ok("cidr", "create", "good", "10.96.0.0/28")
	c.ok("cidr", "create", "bad", "10.97.0.0/28")
	const key = "/ipamctl-test/v1/cidrs/bad"
	spoil(t, ep, key)
	for _, verbose := range [][]string{nil, {"-v"}} {
		r := c.run(append([]string{"cidr", "get"}, verbose...)...)
		if r.code != 0 || !strings.Contains(r.stdout, "good") || strings.Contains(r.stdout, "bad") {
			t.Errorf("cidr get %v: exit %d, want 0, listing good and not bad:\n%s", verbose, r.code, r.stdout)
		}
		if !strings.Contains(r.stderr, "ipamctl: warning:") || !strings.Contains(r.stderr, key) {
			t.Errorf("cidr get %v: stderr does not warn of %s:\n%s", verbose, key, r.stderr)
		}
		if n := strings.Count(r.stderr, key); n != 1 {
			t.Errorf("cidr get %v: stderr names %s %d times, want once:\n%s", verbose, key, n, r.stderr)
		}
	}
	if a := c.allocateNext("services/default/web"); !netip.MustParsePrefix("10.96.0.0/28").Contains(a) {
		t.Errorf("allocated %s, want an address of good", a)
	}
}

// An address record whose value in etcd cannot be read (edited by hand)
// hides none of the others: ip get lists those, warns on stderr of the key
// it left out, with or without -v, and exits 1 (corrupt data), also with
// -o json, whose list is still whole JSON. repair goes on with the rest (a
// leak deleted, a missing record restored), shows the unreadable record as
// Failed, exits 0, and leaves it as it was.
func TestARecordInEtcdThatCannotBeReadIsLeftOutAndSaidSo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	ep := startEtcd(t)
	c := &cli{t: t, store: []string{"--etcd", ep, "--etcd-prefix", "/ipamctl-test"}}
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/24")
	c.ok("ip", "allocate", "10.96.0.1", "--parent", "services/default/kubernetes")
	c.ok("ip", "allocate", "10.96.0.5", "--parent", "services/default/c")
	c.ok("ip", "allocate", "10.96.0.6", "--parent", "services/default/gone")
	const key = "/ipamctl-test/v1/ips/4/0a600005" // 10.96.0.5's record
	etc, edited, editedRev := spoil(t, ep, key)

	warned := func(what string, r result) {
		t.Helper()
		if !strings.Contains(r.stderr, "ipamctl: warning: left out of the list:") || !strings.Contains(r.stderr, key) ||
			!strings.Contains(r.stderr, "ipamctl: the list lacks 1 record that cannot be read") {
			t.Errorf("%s: stderr does not warn of %s and say the list lacks it:\n%s", what, key, r.stderr)
		}
		if n := strings.Count(r.stderr, key); n != 1 {
			t.Errorf("%s: stderr names %s %d times, want once:\n%s", what, key, n, r.stderr)
		}
	}
	for _, verbose := range [][]string{nil, {"-v"}} {
		r := c.run(append([]string{"ip", "get"}, verbose...)...)
		if r.code != exitError || !strings.Contains(r.stdout, "10.96.0.1 ") || !strings.Contains(r.stdout, "10.96.0.6 ") || strings.Contains(r.stdout, "10.96.0.5") {
			t.Errorf("ip get %v: exit %d, want %d, listing 10.96.0.1 and 10.96.0.6 only:\n%s", verbose, r.code, exitError, r.stdout)
		}
		warned(fmt.Sprintf("ip get %v", verbose), r)
	}
	r := c.run("ip", "get", "-o", "json")
	var l list[ipObject]
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || r.code != exitError || len(l.Items) != 2 {
		t.Errorf("ip get -o json: exit %d, %v, %+v; want %d and the 2 records readable", r.code, err, l.Items, exitError)
	}
	warned("ip get -o json", r)

	file := filepath.Join(t.TempDir(), "consumers.json")
	consumers := `[
  {"parentRef": "services/default/kubernetes", "addresses": ["10.96.0.1"]},
  {"parentRef": "services/default/c", "addresses": ["10.96.0.5"]},
  {"parentRef": "services/default/a", "addresses": ["10.96.0.7"]}
]`
	if err := os.WriteFile(file, []byte(consumers), 0o600); err != nil {
		t.Fatal(err)
	}
	out := c.ok("repair", "--consumers", file, "--leak-grace", "0s")
	rows := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			rows[f[1]] = line
		}
	}
	if !strings.HasPrefix(rows["10.96.0.5"], "Failed ") || !strings.Contains(rows["10.96.0.5"], "cannot be read") || !strings.Contains(rows["10.96.0.5"], key) ||
		!strings.HasPrefix(rows["10.96.0.6"], "Leak ") || !strings.HasPrefix(rows["10.96.0.7"], "Repaired ") || !strings.Contains(out, "3 findings") {
		t.Errorf("repair: want 10.96.0.5 Failed (cannot be read), 10.96.0.6 Leak, 10.96.0.7 Repaired:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	after, err := etc.Get(ctx, key)
	if err != nil || len(after.Kvs) != 1 || string(after.Kvs[0].Value) != edited || after.Kvs[0].ModRevision != editedRev {
		t.Errorf("the unreadable record after repair: %v, %v; want it as it was", after, err)
	}
	var rep repairReport
	c.json(&rep, "repair", "--consumers", file)
	if len(rep.Events) != 1 || rep.Events[0].Kind != "Failed" || rep.Events[0].Reason != "UnknownError" || rep.Events[0].Address != "10.96.0.5" || rep.Events[0].Ref != "" || rep.Records != 3 {
		t.Errorf("repair again -o json: %+v; want only 10.96.0.5, Failed, no parentRef, of 3 records", rep)
	}
}

// An address record in etcd that cannot be read might be any owner's, and
// hides none of an owner's records: ip get --parent lists them, warns of
// the key it left out and exits 1; ip release --parent releases them,
// prints them, warns of the key as not released and exits 1 (corrupt
// data), also with -o json, whose output is still whole JSON. The record
// that cannot be read is left as it was.
func TestAnOwnersRecordsInEtcdBesideOneThatCannotBeRead(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	ep := startEtcd(t)
	c := &cli{t: t, store: []string{"--etcd", ep, "--etcd-prefix", "/ipamctl-test"}}
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/24")
	for _, a := range []struct{ addr, parent string }{
		{"10.96.0.1", "services/default/a"}, {"10.96.0.2", "services/default/a"}, {"10.96.0.3", "services/default/b"},
		{"10.96.0.4", "services/default/c"}, {"10.96.0.5", "services/default/c"},
	} {
		c.ok("ip", "allocate", a.addr, "--parent", a.parent)
	}
	const key = "/ipamctl-test/v1/ips/4/0a600003" // 10.96.0.3's record, b's
	etc, edited, editedRev := spoil(t, ep, key)
	warned := func(what string, r result, warning string) {
		t.Helper()
		if !strings.Contains(r.stderr, "ipamctl: warning: "+warning+": ") || !strings.Contains(r.stderr, key) {
			t.Errorf("%s: stderr does not warn of %s (%q):\n%s", what, key, warning, r.stderr)
		}
		if n := strings.Count(r.stderr, key); n != 1 {
			t.Errorf("%s: stderr names %s %d times, want once:\n%s", what, key, n, r.stderr)
		}
	}

	r := c.run("ip", "get", "--parent", "services/default/a")
	if r.code != exitError || !strings.Contains(r.stdout, "10.96.0.1 ") || !strings.Contains(r.stdout, "10.96.0.2 ") || strings.Contains(r.stdout, "10.96.0.3") {
		t.Errorf("ip get --parent a: exit %d, want %d, listing 10.96.0.1 and 10.96.0.2 only:\n%s", r.code, exitError, r.stdout)
	}
	warned("ip get --parent a", r, "left out of the list")
	if !strings.Contains(r.stderr, "ipamctl: the list lacks 1 record that cannot be read") {
		t.Errorf("ip get --parent a: stderr does not say the list lacks the record:\n%s", r.stderr)
	}

	r = c.run("ip", "release", "--parent", "services/default/a")
	if r.code != exitError || r.stdout != "ipaddress/10.96.0.1 released\nipaddress/10.96.0.2 released\n" {
		t.Errorf("ip release --parent a: exit %d, want %d, releasing 10.96.0.1 and 10.96.0.2:\n%s", r.code, exitError, r.stdout)
	}
	warned("ip release --parent a", r, "not released")
	if !strings.Contains(r.stderr, "ipamctl: services/default/a may still hold 1 record that cannot be read (not released, see the warnings): stored value cannot be decoded") {
		t.Errorf("ip release --parent a: stderr does not say a may still hold the record:\n%s", r.stderr)
	}
	for _, addr := range []string{"10.96.0.1", "10.96.0.2"} {
		c.fail(exitNotFound, "not found", "ip", "get", addr)
	}

	r = c.run("ip", "release", "--parent", "services/default/c", "-o", "json")
	var out struct {
		Released []string `json:"released"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != exitError || strings.Join(out.Released, " ") != "10.96.0.4 10.96.0.5" {
		t.Errorf("ip release --parent c -o json: exit %d, %v, %+v; want %d and 10.96.0.4 and 10.96.0.5 released", r.code, err, out, exitError)
	}
	warned("ip release --parent c -o json", r, "not released")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	after, err := etc.Get(ctx, key)
	if err != nil || len(after.Kvs) != 1 || string(after.Kvs[0].Value) != edited || after.Kvs[0].ModRevision != editedRev {
		t.Errorf("the unreadable record after the releases: %v, %v; want it as it was", after, err)
	}
}

// An endpoint nobody answers on is said to be so, naming it, within the
// 5 s ipamctl gives etcd to answer, not at --timeout as a read timing out.
func TestAnEtcdNobodyAnswersOnIsNamed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // a free port nothing listens on
	c := &cli{t: t, store: []string{"--etcd", addr}}
	// The bounds are --timeout's, which count from when ipamctl has
	// started: the wall clock counts the process's start too, which a
	// loaded machine stretches to seconds. An answer not come within
	// --timeout 15s says "see --timeout"; the wall clock only tells a
	// hang from an end.
	start := time.Now()
	r := c.fail(exitError, "does not answer", "cidr", "get", "--timeout", "15s")
	if !strings.Contains(r.stderr, addr) || strings.Contains(r.stderr, "see --timeout") {
		t.Errorf("stderr %q: want the endpoint named, not a --timeout", r.stderr)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("took %v to say etcd does not answer", took)
	}
	c.fail(exitUsage, "inside another store's records", "cidr", "get", "--etcd-prefix", "/netipam/v1/cidrs/x")

	// A member down among the endpoints costs nothing: the others answer,
	// within a --timeout shorter than the etcdDialTimeout the one down
	// would cost, were it waited for.
	live := startEtcd(t)
	(&cli{t: t, store: []string{"--etcd", addr + "," + live}}).ok("cidr", "get", "--timeout", "4s")
}

// Every --etcd endpoint is checked before etcd is contacted: one the
// client could not dial (no port, a port out of range or not a number,
// white space inside, a scheme it does not take) exits 2 at once, naming
// it, instead of failing as an etcd that does not answer after the 5 s
// dial timeout. Every form the client takes is accepted, and reaches etcd:
// HOST:PORT, http:// and a trailing "/" (the scheme in any case), an IPv6
// address in brackets, spaces around the commas.
func TestAMalformedEtcdEndpointIsRefusedBeforeEtcdIsContacted(t *testing.T) {
	for ep, want := range map[string]string{
		"127.0.0.1":                     "missing port",
		"127.0.0.1:99999":               `port "99999": must be a number from 1 to 65535`,
		"127.0.0.1:0":                   `port "0"`,
		"127.0.0.1:2379x":               `port "2379x"`,
		"127.0.0.1:2379 127.0.0.1:2380": "white space",
		"ftp://127.0.0.1:2379":          `scheme "ftp"`,
		"https://127.0.0.1":             "missing port",
		"http://127.0.0.1:2379/v3":      "no user, path or query",
		"::1:2379":                      "in brackets",
		"[etcd]:2379":                   "not an IPv6 address",
		":2379":                         "no host",
		"unix://":                       "no socket path",
	} {
		// A --timeout shorter than the dial's: an etcd contacted would
		// end in exit 1.
		c := &cli{t: t, store: []string{"--etcd", "127.0.0.1:2379," + ep, "--timeout", "2s"}}
		r := c.fail(exitUsage, want, "cidr", "get")
		if q := fmt.Sprintf("--etcd endpoint %q", ep); !strings.Contains(r.stderr, q) {
			t.Errorf("--etcd %q: stderr %q does not name the endpoint (%s)", ep, r.stderr, q)
		}
	}
	if testing.Short() {
		return
	}
	live := startEtcd(t)
	good := []string{live, "http://" + live, "HTTP://" + live + "/", " " + live + " , http://" + live}
	if l, err := net.Listen("tcp", "[::1]:0"); err == nil {
		l.Close()
		v6 := startMemberOn(t, "ipamctl-test-v6", "::1", nil)
		good = append(good, v6, "http://"+v6+"/")
	} else {
		t.Logf("no IPv6 loopback (%v): [::1]:PORT not tried", err)
	}
	for _, eps := range good {
		(&cli{t: t, store: []string{"--etcd", eps}}).ok("cidr", "get")
	}
}

// --lock-timeout, which bounds the wait for a --db file's lock, is
// refused with --etcd (exit 2, before etcd is contacted), as the
// --etcd-* flags are without --etcd: taken and ignored, it would look
// like a bound it is not.
func TestLockTimeoutIsRefusedWithEtcd(t *testing.T) {
	c := &cli{t: t, store: []string{"--etcd", "127.0.0.1:1", "--timeout", "2s"}}
	c.fail(exitUsage, "--lock-timeout is for the --db file's lock", "usage", "--lock-timeout", "1s")
	c.fail(exitUsage, "--lock-timeout is for the --db file's lock", "--lock-timeout=0", "cidr", "get")
}

// testPKI is a CA, and the certificates it signed for a test etcd and its
// client, as PEM files.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

// newTestPKI makes a testPKI in a temporary directory: the server's
// certificate is for 127.0.0.1, the client's for a CN that is no etcd
// user.
func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ipamctl test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string, serial int64, tmpl *x509.Certificate) (cert, key string) {
		k := newKey()
		tmpl.SerialNumber, tmpl.Subject = big.NewInt(serial), pkix.Name{CommonName: name}
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "PRIVATE KEY", keyDER)
	}
	p := testPKI{ca: write("ca.crt", "CERTIFICATE", caDER)}
	// Client auth too: etcd's gateway calls its own gRPC server with it.
	p.serverCert, p.serverKey = issue("etcd", 2, &x509.Certificate{
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	p.clientCert, p.clientKey = issue("ipamctl-test-client", 3, &x509.Certificate{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return p
}

// startTLSEtcd is startEtcd serving its clients over TLS only, with the
// certificates of p, and requiring a client certificate p's CA signed, as
// a Kubernetes control plane's etcd does. It returns host:port.
func startTLSEtcd(t *testing.T, p testPKI) string {
	t.Helper()
	return startMember(t, "ipamctl-tls-test", &transport.TLSInfo{CertFile: p.serverCert, KeyFile: p.serverKey, TrustedCAFile: p.ca, ClientCertAuth: true})
}

// enableRoot turns authentication on in the etcd at ep, with a user root
// whose password is password.
func enableRoot(t *testing.T, ep string, p testPKI, password string) {
	t.Helper()
	tlsCfg, err := transport.TLSInfo{CertFile: p.clientCert, KeyFile: p.clientKey, TrustedCAFile: p.ca}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: tlsCfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("enabling etcd auth: %v", err)
		}
	}
}

// An etcd serving TLS, requiring a client certificate, and then users, is
// used with --etcd-cacert, --etcd-cert, --etcd-key and --etcd-user (its
// password from the environment or the flag); without them, the error
// names what TLS or authentication refused, not an etcd that "does not
// answer".
func TestAnEtcdOverTLSIsUsedWithItsFlagsAndItsRefusalsNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Setenv(etcdPasswordEnv, "") // the test's own, not the caller's
	p := newTestPKI(t)
	host := startTLSEtcd(t, p)
	ep := "https://" + host
	tlsFlags := []string{"--etcd-cacert", p.ca, "--etcd-cert", p.clientCert, "--etcd-key", p.clientKey}
	c := &cli{t: t, store: append([]string{"--etcd", ep}, tlsFlags...)}
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/28")
	c.ok("ip", "allocate", "10.96.0.1", "--parent", "services/default/kubernetes")
	// A bare host:port is reached over TLS too when TLS flags are given,
	// as etcdctl does.
	var ips list[ipObject]
	(&cli{t: t, store: append([]string{"--etcd", host}, tlsFlags...)}).json(&ips, "ip", "get")
	if len(ips.Items) != 1 || ips.Items[0].Name != "10.96.0.1" {
		t.Fatalf("ip get over TLS: %+v", ips)
	}

	for _, tc := range []struct {
		what  string
		store []string
		want  string
	}{
		{"no CA: etcd's certificate is not trusted", []string{"--etcd", ep, "--etcd-cert", p.clientCert, "--etcd-key", p.clientKey}, "certificate"},
		{"no client certificate", []string{"--etcd", ep, "--etcd-cacert", p.ca}, "certificate"},
		{"plain text to a TLS endpoint", []string{"--etcd", host}, "https://" + host},
	} {
		r := (&cli{t: t, store: tc.store}).fail(exitError, tc.want, "cidr", "get")
		t.Logf("%s: %s", tc.what, r.stderr)
		if !strings.Contains(r.stderr, "TLS") || strings.Contains(r.stderr, "does not answer") {
			t.Errorf("%s: stderr %q does not name TLS as the cause", tc.what, r.stderr)
		}
	}
	(&cli{t: t, store: []string{"--etcd", ep, "--etcd-cert", p.clientCert}}).fail(exitUsage, "--etcd-cert and --etcd-key go together", "cidr", "get")
	(&cli{t: t, store: []string{"--etcd", ep, "--etcd-cacert", filepath.Join(t.TempDir(), "none.crt")}}).fail(exitUsage, "none.crt", "cidr", "get")
	(&cli{t: t, store: []string{"--db", filepath.Join(t.TempDir(), "ipam.db"), "--etcd-cacert", p.ca}}).fail(exitUsage, "--etcd-cacert needs --etcd", "cidr", "get")

	const password = "s3cret-Pa55"
	enableRoot(t, ep, p, password)
	// The client certificate's CN is no user: without --etcd-user, etcd
	// refuses the requests.
	t.Logf("no user: %s", c.fail(exitError, "", "cidr", "get").stderr)
	asRoot := append(append([]string{}, c.store...), "--etcd-user", "root")
	fromEnv := &cli{t: t, store: asRoot, env: []string{etcdPasswordEnv + "=" + password}}
	if out := fromEnv.ok("cidr", "get"); !strings.Contains(out, "kubernetes") {
		t.Errorf("cidr get as root, password from %s:\n%s", etcdPasswordEnv, out)
	}
	inline := &cli{t: t, store: append(append([]string{}, c.store...), "--etcd-user", "root:"+password)}
	inline.ok("ip", "allocate", "--family", "4", "--parent", "services/default/as-root")
	r := (&cli{t: t, store: append(append([]string{}, c.store...), "--etcd-user", "root:not-"+password)}).fail(exitError, "authentication failed", "cidr", "get")
	t.Logf("wrong password: %s", r.stderr)
	if strings.Contains(r.stderr, password) {
		t.Errorf("the error shows the password: %q", r.stderr)
	}
	(&cli{t: t, store: asRoot}).fail(exitUsage, etcdPasswordEnv, "cidr", "get")
}

// --etcd-cacert naming a file that holds no certificate (empty, some
// other text) is refused, exit 2, before etcd is contacted: the client
// would read it as a pool of no CA, and trust no etcd.
func TestACACertFileWithoutACertificateIsRefused(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"empty.pem": "", "text.pem": "not a certificate\n"} {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		// A --timeout shorter than the dial's: an etcd contacted would
		// end in exit 1.
		c := &cli{t: t, store: []string{"--etcd", "127.0.0.1:1", "--etcd-cacert", file, "--timeout", "2s"}}
		c.fail(exitUsage, "--etcd-cacert "+file+": the file holds no certificate", "cidr", "get")
	}
}

// spoil appends a space, which the store never writes, to the value of
// key in the etcd at ep, so that the store can no longer read it (read, it
// would be what it was). It returns a client on ep, closed with the test,
// and the key's value and revision after the edit.
func spoil(t *testing.T, ep, key string) (etc *clientv3.Client, value string, rev int64) {
	t.Helper()
	etc, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := etc.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("reading %s: %v, %v", key, got, err)
	}
	if _, err := etc.Put(ctx, key, string(got.Kvs[0].Value)+" "); err != nil {
		t.Fatal(err)
	}
	if got, err = etc.Get(ctx, key); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("reading %s back: %v, %v", key, got, err)
	}
	return etc, string(got.Kvs[0].Value), got.Kvs[0].ModRevision
}
