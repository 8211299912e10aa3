package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/term"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/etcd"
)

// etcdPasswordEnv holds the password of --etcd-user NAME, so that it need
// not be on the command line, where other users see it. Without it, on a
// terminal, ipamctl asks for the password (askEtcdPassword).
const etcdPasswordEnv = "IPAMCTL_ETCD_PASSWORD"

// etcdSpec is the etcd cluster the flags name, and how to connect to it.
type etcdSpec struct {
	endpoints []string
	prefix    string      // "": the store's default
	tls       *tls.Config // nil: TLS only for https:// endpoints, trusting the system's CAs
	user      string      // "": no authentication
	password  string
	// askPassword: --etcd-user NAME gave no password, nor did
	// etcdPasswordEnv; askEtcdPassword asks for it on the terminal.
	askPassword bool
}

// parseEtcdFlags checks the flags of --etcd and reads the TLS files they
// name; it contacts nothing.
func parseEtcdFlags(cl cmdline) (*etcdSpec, error) {
	spec := &etcdSpec{}
	eps := cl.flags["etcd"]
	for _, ep := range strings.Split(eps, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			spec.endpoints = append(spec.endpoints, ep)
		}
	}
	if len(spec.endpoints) == 0 {
		return nil, usageErrorf("--etcd %q: no endpoint", eps)
	}
	for _, ep := range spec.endpoints {
		if err := checkEndpoint(ep); err != nil {
			return nil, usageErrorf("--etcd endpoint %q: %v", ep, err)
		}
	}
	for _, f := range []string{"etcd-prefix", "etcd-cacert", "etcd-cert", "etcd-key", "etcd-user"} {
		// An unset variable must not mean the default, or no TLS.
		if v, ok := cl.flags[f]; ok && v == "" {
			return nil, usageErrorf("--%s \"\": nothing named", f)
		}
	}
	spec.prefix = cl.flags["etcd-prefix"]
	if err := etcd.CheckPrefix(spec.prefix); err != nil {
		// The error names the prefix already; the flag's name says where.
		var fe *ipaddress.FieldError
		if errors.As(err, &fe) {
			return nil, usageErrorf("--etcd-prefix %q: %s", spec.prefix, fe.Detail)
		}
		return nil, usageErrorf("--etcd-prefix: %v", err)
	}

	info := transport.TLSInfo{TrustedCAFile: cl.flags["etcd-cacert"], CertFile: cl.flags["etcd-cert"], KeyFile: cl.flags["etcd-key"]}
	if (info.CertFile == "") != (info.KeyFile == "") {
		return nil, usageErrorf("--etcd-cert and --etcd-key go together: the client certificate and its key")
	}
	if info.TrustedCAFile != "" || !info.Empty() {
		cfg, err := info.ClientConfig()
		if err != nil {
			return nil, usageErrorf("--etcd-cacert, --etcd-cert, --etcd-key: %v", err)
		}
		// The client reads a file without a PEM block as no CA at all: no
		// etcd's certificate would be trusted, and the error would come
		// only from the handshake.
		if info.TrustedCAFile != "" && cfg.RootCAs.Equal(x509.NewCertPool()) {
			return nil, usageErrorf("--etcd-cacert %s: the file holds no certificate (want PEM, -----BEGIN CERTIFICATE-----)", info.TrustedCAFile)
		}
		spec.tls = cfg
	}
	// The etcd client takes TLS or not for all endpoints from the first
	// one: in a list where some are reached over TLS and some are not,
	// those of the other kind fail only when the client turns to them.
	var plain, secure bool
	for _, ep := range spec.endpoints {
		if overTLS(ep, spec.tls != nil) {
			secure = true
		} else {
			plain = true
		}
	}
	if plain && secure {
		return nil, usageErrorf("--etcd %q: some endpoints are reached over TLS and some not (http:// or https://, or HOST:PORT, which is TLS only with --etcd-cacert or --etcd-cert): the client would take the first one's way for all", eps)
	}

	if u, ok := cl.flags["etcd-user"]; ok {
		name, password, inline := strings.Cut(u, ":")
		if !inline {
			password = os.Getenv(etcdPasswordEnv)
		}
		switch {
		case name == "":
			return nil, usageErrorf("--etcd-user: no user name (NAME or NAME:PASSWORD)")
		case password == "" && inline:
			// The flag's value is not repeated: it may hold a password.
			return nil, usageErrorf("--etcd-user: an empty password for %s", name)
		}
		spec.user, spec.password, spec.askPassword = name, password, password == ""
	}
	return spec, nil
}

// checkEndpoint reports what is wrong with the etcd endpoint ep, if
// anything, in the forms the etcd client takes: HOST:PORT; http:// or
// https:// and HOST:PORT (a trailing "/" allowed); unix: or unixs: and a
// path (unix:///abs, unix://rel, unix:rel). An IPv6 address goes in
// brackets, [::1]:2379; the port is a number from 1 to 65535. An endpoint
// the client cannot dial is otherwise found only when the dial times out,
// after etcdDialTimeout, the error naming nothing wrong with it.
func checkEndpoint(ep string) error {
	if strings.ContainsFunc(ep, unicode.IsSpace) {
		return errors.New("holds white space (endpoints are separated by commas)")
	}
	lower := strings.ToLower(ep)
	if strings.HasPrefix(lower, "unix:") || strings.HasPrefix(lower, "unixs:") {
		_, path, _ := strings.Cut(ep, ":")
		if strings.TrimPrefix(path, "//") == "" {
			return errors.New("no socket path")
		}
		return nil
	}
	if !strings.Contains(ep, "://") {
		return checkHostPort(ep)
	}
	u, err := url.Parse(ep)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL: %v", errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme %q: must be http, https, unix or unixs", u.Scheme)
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		// The client would dial HOST:PORT and ignore the rest.
		return errors.New("a URL names only the scheme and HOST:PORT (no user, path or query: the client would ignore them; --etcd-user names a user)")
	}
	return checkHostPort(u.Host)
}

// checkHostPort reports what is wrong with hp as HOST:PORT, if anything.
func checkHostPort(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	var ae *net.AddrError
	switch {
	case errors.As(err, &ae) && strings.Contains(ae.Err, "too many colons"):
		return fmt.Errorf("not HOST:PORT (%s; an IPv6 address goes in brackets, [::1]:2379)", ae.Err)
	case errors.As(err, &ae):
		return fmt.Errorf("not HOST:PORT (%s)", ae.Err)
	case err != nil:
		return fmt.Errorf("not HOST:PORT (%v)", err)
	case host == "":
		// An unset variable in --etcd "$HOST:2379" must not mean this host.
		return errors.New("no host before the port")
	case strings.HasPrefix(hp, "["):
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() {
			return fmt.Errorf("%q in brackets is not an IPv6 address", host)
		}
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("port %q: must be a number from 1 to 65535", port)
	}
	return nil
}

// askEtcdPassword asks for the password of spec's user on the terminal
// that stdin is, without echoing it, the prompt on stderr; stdin that is
// no terminal (a pipe, a file, a script's) is refused with a usage error
// naming the other ways, as a password read from it would be a guess at
// what the caller meant. An interrupt (ctx ending) gives the terminal
// back as it was, echo on, and ends the command.
func askEtcdPassword(ctx context.Context, spec *etcdSpec, stdin io.Reader, stderr io.Writer) error {
	f, ok := stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return usageErrorf("--etcd-user: no password for %s: give NAME:PASSWORD, set %s, or run ipamctl on a terminal, which asks", spec.user, etcdPasswordEnv)
	}
	fd := int(f.Fd())
	state, err := term.GetState(fd)
	if err != nil {
		return fmt.Errorf("reading the password of etcd user %s: %w", spec.user, err)
	}
	fmt.Fprintf(stderr, "Password for etcd user %s: ", spec.user)
	type answer struct {
		password []byte
		err      error
	}
	got := make(chan answer, 1)
	go func() {
		p, err := term.ReadPassword(fd)
		got <- answer{p, err}
	}()
	var a answer
	select {
	case a = <-got:
	case <-ctx.Done():
		// Ctrl-C is caught (main), so the read goes on: the terminal is
		// restored here, and the read left behind as the process exits.
		_ = term.Restore(fd, state)
		fmt.Fprintln(stderr)
		return fmt.Errorf("interrupted at the password prompt: %w", ctx.Err())
	}
	fmt.Fprintln(stderr) // the newline the user typed was not echoed
	switch {
	case a.err != nil:
		return fmt.Errorf("reading the password of etcd user %s: %w", spec.user, a.err)
	case len(a.password) == 0:
		return usageErrorf("--etcd-user: an empty password for %s", spec.user)
	}
	spec.password, spec.askPassword = string(a.password), false
	return nil
}

// overTLS reports whether the etcd client reaches endpoint ep over TLS:
// by its scheme (any case), or, for a bare HOST:PORT, when TLS flags are
// given.
func overTLS(ep string, tlsFlags bool) bool {
	scheme, _, found := strings.Cut(strings.ToLower(ep), ":")
	switch {
	case found && (scheme == "https" || scheme == "unixs"):
		return true
	case found && (scheme == "http" || scheme == "unix"):
		return false
	}
	return tlsFlags
}

// openEtcd connects to the etcd endpoints (host:port or URLs) and returns
// the store over them; closing the store closes the client. warn receives
// the keys the store's watch cannot read and leaves out.
func openEtcd(ctx context.Context, spec *etcdSpec, log *slog.Logger, warn func(error)) (store.Store, error) {
	log.Debug("connecting to etcd", "endpoints", spec.endpoints, "tls", spec.tls != nil, "user", spec.user)
	cfg := clientv3.Config{
		Endpoints: spec.endpoints,
		Context:   ctx,
		TLS:       spec.tls,
		Logger:    zap.NewNop(), // the client logs nothing; -v logs what ipamctl does
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, err
	}
	opts := []etcd.Option{etcd.WithCloseClient(), etcd.WithErrorHandler(warn)}
	if spec.prefix != "" {
		opts = append(opts, etcd.WithPrefix(spec.prefix))
	}
	s, err := etcd.New(cli, opts...)
	if err != nil { // checked in parseEtcdFlags: cannot fail
		cli.Close()
		return nil, err
	}
	// The client connects lazily: without this, an endpoint nobody
	// answers on would show only as the first read timing out at
	// --timeout, naming neither etcd nor the endpoint.
	if err := reachable(ctx, cli, spec); err != nil {
		s.Close()
		return nil, err
	}
	if spec.user == "" {
		return s, nil
	}
	// A client with a user authenticates in clientv3.New, waiting for an
	// endpoint as long as its context lets it and then saying only that
	// it timed out: so the client without one probed first, and now that
	// an endpoint answers, one with the user takes its place.
	s.Close()
	cfg.Username, cfg.Password = spec.user, spec.password
	cfg.DialTimeout = etcdDialTimeout
	if cli, err = clientv3.New(cfg); err != nil {
		return nil, fmt.Errorf("etcd at %s: authenticating as %s: %w", strings.Join(spec.endpoints, ", "), spec.user, err)
	}
	if s, err = etcd.New(cli, opts...); err != nil { // checked above: cannot fail
		cli.Close()
		return nil, err
	}
	return s, nil
}

// etcdDialTimeout bounds how long ipamctl waits for some endpoint to
// answer before it says none does.
const etcdDialTimeout = 5 * time.Second

// reachable returns nil once one of the endpoints answers, or an error
// naming them all after etcdDialTimeout (or when ctx ends), with why they
// did not answer where that can be found out.
func reachable(ctx context.Context, cli *clientv3.Client, spec *etcdSpec) error {
	eps := spec.endpoints
	pctx, cancel := context.WithTimeout(ctx, etcdDialTimeout)
	defer cancel()
	// All at once: the client waits for a connection rather than fail
	// fast, so one endpoint that does not answer would use up the time of
	// the others.
	answers := make(chan error, len(eps))
	for _, ep := range eps {
		go func() {
			_, err := cli.Status(pctx, ep)
			answers <- err
		}()
	}
	var last error
	for range eps {
		if last = <-answers; last == nil {
			return nil
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("connecting to etcd at %s: %w", strings.Join(eps, ", "), ctx.Err())
	}
	// The client keeps the cause of a failed connection to itself: it
	// says only that the probe timed out. Connect again to learn it.
	var tlsErrs []error
	for _, err := range diagnose(ctx, eps, spec.tls) {
		var te *tlsError
		switch {
		case errors.As(err, &te):
			tlsErrs = append(tlsErrs, te)
		case err != nil:
			last = err
		}
	}
	if len(tlsErrs) > 0 {
		return fmt.Errorf("no TLS connection to etcd (see --etcd-cacert, --etcd-cert and --etcd-key): %w", errors.Join(tlsErrs...))
	}
	// %v: the probe's own deadline is not --timeout's.
	return fmt.Errorf("etcd at %s does not answer within %v: %v", strings.Join(eps, ", "), etcdDialTimeout, last)
}

// tlsError is an etcd endpoint that answers, but over TLS it cannot agree
// with: a certificate not trusted on either side, or TLS on one side only.
type tlsError struct {
	endpoint string
	err      error
}

func (e *tlsError) Error() string { return fmt.Sprintf("%s: %v", e.endpoint, e.err) }
func (e *tlsError) Unwrap() error { return e.err }

// diagnoseTimeout bounds the connections diagnose makes.
const diagnoseTimeout = 2 * time.Second

// diagnose connects to each endpoint as the client does and returns, for
// each, why it fails: the connection's error, a *tlsError, or nil when it
// finds nothing wrong (or the endpoint is a unix socket, not looked at).
func diagnose(ctx context.Context, eps []string, cfg *tls.Config) []error {
	ctx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
	defer cancel()
	errs := make([]error, len(eps))
	done := make(chan struct{})
	for i, ep := range eps {
		go func() {
			defer func() { done <- struct{}{} }()
			errs[i] = diagnoseEndpoint(ctx, ep, cfg)
		}()
	}
	for range eps {
		<-done
	}
	return errs
}

func diagnoseEndpoint(ctx context.Context, ep string, cfg *tls.Config) error {
	// The client's rule: https:// is TLS, with the system's CAs unless
	// given others; http:// is not; a bare host:port is TLS if there is a
	// TLS config.
	addr, useTLS := ep, cfg != nil
	if strings.HasPrefix(ep, "unix:") || strings.HasPrefix(ep, "unixs:") {
		return nil
	}
	// The way to TLS for a bare HOST:PORT is a TLS flag or https://; for
	// http://, whatever the flags, only https://.
	advice := ", or give --etcd-cacert"
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return nil
		}
		addr, useTLS, advice = u.Host, u.Scheme == "https", " (http:// is plain text, whatever the TLS flags)"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"h2"}

	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if !useTLS {
		// Plain text to an endpoint serving TLS fails with no word of
		// TLS: see whether a handshake, trusting anything, goes through.
		probe := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, NextProtos: cfg.NextProtos})
		if probe.HandshakeContext(ctx) == nil {
			return &tlsError{ep, errors.New("it serves TLS: name it https://" + addr + advice)}
		}
		return nil
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return &tlsError{ep, fmt.Errorf("TLS handshake: %w", err)}
	}
	// In TLS 1.3 a server refusing the client's certificate (or the lack
	// of one) says so after the handshake, in an alert read next. The
	// server then waits for the client to speak: a read that times out is
	// a connection that works.
	if deadline, ok := ctx.Deadline(); ok {
		tc.SetReadDeadline(deadline)
	}
	var oe *net.OpError
	if _, err := tc.Read(make([]byte, 1)); errors.As(err, &oe) && oe.Op == "remote error" {
		return &tlsError{ep, err}
	}
	return nil
}
