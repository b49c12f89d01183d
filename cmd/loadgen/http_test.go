package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestReadResponse(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
	tests := []struct {
		name string
		in   string
		want error // nil, a sentinel, io.EOF or io.ErrUnexpectedEOF
	}{
		{"ok", ok, nil},
		{"lower case, bare LF", "HTTP/1.1 200 OK\ncontent-length:  2 \n\nhi", nil},
		{"no reason", "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", nil},
		{"repeated length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi", nil},
		{"interim", "HTTP/1.1 100 Continue\r\n\r\n" + ok, nil},
		{"204", "HTTP/1.1 204 No Content\r\n\r\n", nil},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", nil},
		{"404", "HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nnah", errStatus},
		{"500 no body", "HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n", errStatus},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", errMalformed},
		{"no length", "HTTP/1.1 200 OK\r\n\r\nhello", errMalformed},
		{"conflicting length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi", errMalformed},
		{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nhi", errMalformed},
		{"huge length", "HTTP/1.1 200 OK\r\nContent-Length: 9999999999999999999\r\n\r\n", errMalformed},
		{"close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", errMalformed},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", errMalformed},
		{"switching", "HTTP/1.1 101 Switching Protocols\r\n\r\n", errMalformed},
		{"HTTP/2", "HTTP/2 200 OK\r\n\r\n", errMalformed},
		{"bad code", "HTTP/1.1 2x0 OK\r\n\r\n", errMalformed},
		{"code 4 digits", "HTTP/1.1 2000 OK\r\n\r\n", errMalformed},
		{"folded header", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n folded\r\n\r\n", errMalformed},
		{"space in name", "HTTP/1.1 200 OK\r\nContent Length: 0\r\n\r\n", errMalformed},
		{"Kelvin is not K", "HTTP/1.0 200 OK\r\nConnection: \u212aeep-alive\r\nContent-Length: 0\r\n\r\n", errMalformed},
		{"long line", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("x", maxLine) + "\r\n\r\n", errMalformed},
		{"many headers", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: y\r\n", maxHeaders+1) + "Content-Length: 0\r\n\r\n", errMalformed},
		{"empty", "", io.EOF},
		{"cut in status", "HTTP/1.1 20", io.ErrUnexpectedEOF},
		{"cut in headers", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", io.ErrUnexpectedEOF},
		{"cut in body", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := readResponse(bufio.NewReaderSize(strings.NewReader(tt.in), maxLine))
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestReadResponseKeepAlive(t *testing.T) {
	const two = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" +
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
	r := bufio.NewReaderSize(strings.NewReader(two), maxLine)
	for i := range 2 {
		if err := readResponse(r); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
	}
	if err := readResponse(r); err != io.EOF {
		t.Errorf("after the last response: %v, want io.EOF", err)
	}
}

// TestReadResponseBody: a 2xx response's body is kept whole, and the
// next response follows it; a non-2xx one is errStatus with nothing kept;
// a body longer than maxLine is refused.
func TestReadResponseBody(t *testing.T) {
	const in = "HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\n{\"HeapLive\":1}" +
		"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nnah" +
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
	r := bufio.NewReaderSize(strings.NewReader(in), maxLine)
	var body []byte
	if err := readResponseBody(r, &body); err != nil || string(body) != `{"HeapLive":1}` {
		t.Fatalf("first response: %q, %v", body, err)
	}
	body = nil
	if err := readResponseBody(r, &body); !errors.Is(err, errStatus) || body != nil {
		t.Errorf("404: %q, %v; want nothing kept, errStatus", body, err)
	}
	if err := readResponseBody(r, &body); err != nil || len(body) != 0 {
		t.Errorf("empty 200: %q, %v", body, err)
	}
	long := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", maxLine+1, strings.Repeat("x", maxLine+1))
	if err := readResponseBody(bufio.NewReaderSize(strings.NewReader(long), maxLine), &body); !errors.Is(err, errMalformed) {
		t.Errorf("a %d-byte body to keep: %v, want errMalformed", maxLine+1, err)
	}
}

// FuzzReadResponse feeds arbitrary bytes to the parser: it must not panic,
// must accept only responses with an HTTP/1.x status line, and must report a
// failure that classify sorts.
func FuzzReadResponse(f *testing.F) {
	f.Add("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
	f.Add("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
	f.Add("HTTP/1.0 404 x\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n!")
	f.Fuzz(func(t *testing.T, in string) {
		err := readResponse(bufio.NewReaderSize(strings.NewReader(in), maxLine))
		if err == nil && !strings.HasPrefix(in, "HTTP/1.") {
			t.Fatalf("accepted %q", in)
		}
		if err != nil && classify(err) == kindConn {
			t.Fatalf("unsorted failure %v", err)
		}
	})
}
