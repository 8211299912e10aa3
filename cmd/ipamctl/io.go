package main

import "io"

func readAll(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, io.ErrUnexpectedEOF
	}
	return io.ReadAll(r)
}
