package main

import (
	"context"
	"io"
	"os"
)

// readAllContext reads r to its end, or until ctx ends: --timeout and
// Ctrl-C bound a wait for standard input too.
func readAllContext(ctx context.Context, r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, io.ErrUnexpectedEOF
	}
	return readContext(ctx, func() ([]byte, error) { return io.ReadAll(r) })
}

// readFileContext reads the file at path, or gives up when ctx ends. The
// open is bounded too: open(2) of a FIFO blocks until a writer comes, and
// bash's <(...) is a pipe.
func readFileContext(ctx context.Context, path string) ([]byte, error) {
	return readContext(ctx, func() ([]byte, error) { return os.ReadFile(path) })
}

// readContext returns what read returns, or ctx's error if ctx ends first.
// Given up, read stays blocked in its goroutine until the process exits,
// which it is about to.
func readContext(ctx context.Context, read func() ([]byte, error)) ([]byte, error) {
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1) // buffered: a late read never blocks on the send
	go func() {
		data, err := read()
		done <- result{data, err}
	}()
	select {
	case res := <-done:
		return res.data, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// maxLostOutput bounds the output an outputWriter keeps once stdout fails:
// enough for any change's report, not a listing of millions of records.
const maxLostOutput = 64 << 10

// An outputWriter is standard output as a command writes it. Once a write
// fails (a full disk, an I/O error; a closed pipe ends the process with
// SIGPIPE instead), it keeps the error and what could not be written, up
// to maxLostOutput bytes, and reports every write done, so that the
// command runs to its end as it would have: its change is made whether or
// not it can say so. run then puts what was lost on stderr.
type outputWriter struct {
	w       io.Writer
	err     error  // the first write error
	lost    []byte // what was not written, from the failed write on
	dropped int    // bytes past maxLostOutput, not kept
}

func (o *outputWriter) Write(p []byte) (int, error) {
	rest := p
	if o.err == nil {
		n, err := o.w.Write(p)
		if err == nil {
			return n, nil
		}
		o.err, rest = err, p[n:]
	}
	keep := min(len(rest), maxLostOutput-len(o.lost))
	o.lost = append(o.lost, rest[:keep]...)
	o.dropped += len(rest) - keep
	return len(p), nil
}
