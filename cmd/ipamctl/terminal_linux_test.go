package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openTerminal opens a pseudo-terminal, both ends closed with the test:
// what is written to master is what a user types on slave.
func openTerminal(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("numbering the pseudo-terminal: %v", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening the pseudo-terminal's other end: %v", err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

// runOnTerminal runs ipamctl with stdin a terminal on which typed was
// typed before it started.
func (c *cli) runOnTerminal(typed string, args ...string) result {
	c.t.Helper()
	master, slave := openTerminal(c.t)
	if _, err := master.WriteString(typed); err != nil {
		c.t.Fatal(err)
	}
	on := *c
	on.stdin = slave
	return on.run(args...)
}

// --etcd-user NAME with no password given and none in the environment:
// on a terminal ipamctl asks for it (prompt on stderr, the answer not in
// any output), and uses it; an empty answer is refused as an empty
// password is on the command line; stdin that is not a terminal gets the
// usage error naming the three ways.
func TestAnEtcdPasswordIsAskedForOnATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	t.Setenv(etcdPasswordEnv, "")
	p := newTestPKI(t)
	ep := "https://" + startTLSEtcd(t, p)
	tlsFlags := []string{"--etcd", ep, "--etcd-cacert", p.ca, "--etcd-cert", p.clientCert, "--etcd-key", p.clientKey}
	(&cli{t: t, store: tlsFlags}).ok("cidr", "create", "kubernetes", "10.96.0.0/28")
	const password = "typed-Pa55"
	enableRoot(t, ep, p, password)
	asRoot := &cli{t: t, store: append(append([]string{}, tlsFlags...), "--etcd-user", "root")}

	r := asRoot.runOnTerminal(password+"\n", "cidr", "get")
	if r.code != 0 || !strings.Contains(r.stdout, "kubernetes") {
		t.Fatalf("cidr get, the password typed: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "Password for etcd user root: ") {
		t.Errorf("no prompt on stderr: %q", r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, password) {
		t.Errorf("the password shows in the output: %q, %q", r.stdout, r.stderr)
	}

	r = asRoot.runOnTerminal("not-"+password+"\n", "cidr", "get")
	if r.code != exitError || !strings.Contains(r.stderr, "authentication failed") {
		t.Errorf("a wrong password typed: exit %d, stderr %q; want %d, authentication failed", r.code, r.stderr, exitError)
	}
	r = asRoot.runOnTerminal("\n", "cidr", "get")
	if r.code != exitUsage || !strings.Contains(r.stderr, "an empty password for root") {
		t.Errorf("an empty password typed: exit %d, stderr %q; want %d", r.code, r.stderr, exitUsage)
	}
	r = asRoot.fail(exitUsage, "or run ipamctl on a terminal", "cidr", "get")
	if strings.Contains(r.stderr, "Password for") {
		t.Errorf("stdin not a terminal, yet a prompt: %q", r.stderr)
	}
	(&cli{t: t, store: append(append([]string{}, tlsFlags...), "--etcd-user", "root:")}).fail(exitUsage, "an empty password for root", "cidr", "get")
}

// Ctrl-C at the password prompt ends ipamctl at once (exit 1, saying it
// was interrupted), with the terminal's echo, which the prompt turned
// off, back on. No etcd is needed: nothing is contacted before the
// password.
func TestCtrlCAtThePasswordPromptRestoresTheTerminal(t *testing.T) {
	t.Setenv(etcdPasswordEnv, "")
	_, slave := openTerminal(t)
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if before.Lflag&unix.ECHO == 0 {
		t.Fatal("a new terminal without echo: the test cannot tell")
	}
	cmd := exec.Command(bin, "--etcd", "127.0.0.1:1", "--etcd-user", "root", "cidr", "get")
	cmd.Stdin = slave
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Once the prompt is out, the echo goes off; wait for both, then
	// interrupt.
	prompt := make([]byte, len("Password for etcd user root: "))
	r := bufio.NewReader(stderr)
	if _, err := r.Read(prompt[:1]); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if st.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the prompt never turned the echo off")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r)
		rest <- string(prompt[:1]) + b.String()
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("still waiting for the password 10 s after Ctrl-C")
	}
	var ee *exec.ExitError
	out := <-rest
	if !errors.As(werr, &ee) || ee.ExitCode() != exitError || !strings.Contains(out, "interrupted at the password prompt") {
		t.Errorf("after Ctrl-C: %v, stderr %q; want exit %d, interrupted", werr, out, exitError)
	}
	after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag&unix.ECHO == 0 {
		t.Error("the terminal's echo is still off after Ctrl-C at the prompt")
	}
}
