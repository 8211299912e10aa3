package etcd

import "testing"

// h2Frame is an HTTP/2 frame of type typ on stream, with payload.
func h2Frame(typ byte, stream uint32, payload string) string {
	n := len(payload)
	return string([]byte{byte(n >> 16), byte(n >> 8), byte(n), typ, 0,
		byte(stream >> 24), byte(stream >> 16), byte(stream >> 8), byte(stream)}) + payload
}

// twoCalls opens a connection, then starts two calls (HEADERS on streams
// 1 and 3) around a DATA frame, and sends HEADERS again on stream 1
// (trailers: no new call).
func twoCalls() []byte {
	return []byte(h2Preface + h2Frame(0x4, 0, "") + h2Frame(0x1, 1, "hdr") + h2Frame(0x0, 1, "data") +
		h2Frame(0x1, 3, "hdr") + h2Frame(0x1, 1, "trailers"))
}

func TestH2CallsCountsTheStreamsOpened(t *testing.T) {
	h := h2Calls{preface: len(h2Preface)}
	if got := h.scan(twoCalls()); got != 2 {
		t.Fatalf("%d calls, want 2", got)
	}
}

// FuzzH2CallsSplit: the test proxy's frame reader counts the calls a byte
// stream starts the same however the stream is cut into reads, and never
// panics on any bytes.
func FuzzH2CallsSplit(f *testing.F) {
	for cut := range len(twoCalls()) {
		f.Add(twoCalls(), uint16(cut))
	}
	f.Add([]byte(h2Preface), uint16(3))
	f.Fuzz(func(t *testing.T, stream []byte, cut uint16) {
		whole := h2Calls{preface: len(h2Preface)}
		want := whole.scan(stream)
		at := int(cut) % (len(stream) + 1)
		split := h2Calls{preface: len(h2Preface)}
		if got := split.scan(stream[:at]) + split.scan(stream[at:]); got != want {
			t.Fatalf("cut at %d: %d calls, whole: %d", at, got, want)
		}
		if split != whole {
			t.Fatalf("cut at %d: state %+v, whole: %+v", at, split, whole)
		}
	})
}
