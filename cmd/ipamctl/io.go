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
