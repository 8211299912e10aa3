package main

import (
	"context"
	"io"
)

// readAllContext reads r to its end, or until ctx ends: --timeout and
// Ctrl-C bound a wait for standard input too. Given up, the read stays
// blocked in its goroutine until the process exits, which it is about to.
func readAllContext(ctx context.Context, r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, io.ErrUnexpectedEOF
	}
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := io.ReadAll(r)
		done <- result{data, err}
	}()
	select {
	case res := <-done:
		return res.data, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
