package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// httpConn sends keep-alive GET requests and reads their responses. It
// parses just enough HTTP/1.1 to find where each response ends: the status
// line, Content-Length, and the headers that would leave the end unknown or
// close the connection.
type httpConn struct {
	c    net.Conn
	r    *bufio.Reader
	host string
	req  []byte
}

var _ protoConn = (*httpConn)(nil)

func newHTTPConn(c net.Conn, host, path string) *httpConn {
	return &httpConn{
		c:    c,
		r:    bufio.NewReaderSize(c, maxLine),
		host: host,
		req:  getRequest(host, path),
	}
}

// getRequest is a keep-alive GET of path.
func getRequest(host, path string) []byte {
	return []byte("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
}

func (h *httpConn) send(uint64) error {
	_, err := h.c.Write(h.req)
	return err
}

func (h *httpConn) recv(uint64) error { return readResponse(h.r) }

// memstats asks the server for its memory figures with GET
// loadproto.MemstatsPath (cmd/httpserver collects, then answers them as
// JSON). A server that answers another status than 2xx, as one without
// the path does with 404, gives an error wrapping errNoFigures.
func (h *httpConn) memstats(uint64) (loadproto.Figures, error) {
	var f loadproto.Figures
	if _, err := h.c.Write(getRequest(h.host, loadproto.MemstatsPath)); err != nil {
		return f, err
	}
	var body []byte
	err := readResponseBody(h.r, &body)
	switch {
	case errors.Is(err, errStatus):
		return f, fmt.Errorf("%w: GET %s: %w", errNoFigures, loadproto.MemstatsPath, err)
	case err != nil:
		return f, err
	}
	if err := json.Unmarshal(body, &f); err != nil {
		return f, fmt.Errorf("%w: GET %s: %v", errMalformed, loadproto.MemstatsPath, err)
	}
	return f, nil
}

var (
	// errMalformed reports a response loadgen cannot delimit or that ends
	// the keep-alive connection.
	errMalformed = errors.New("malformed HTTP response")
	// errStatus reports a complete response whose status is not 2xx.
	errStatus = errors.New("HTTP status not 2xx")
)

const (
	maxLine    = 4096 // bytes in the status line or a header line
	maxHeaders = 100
)

// readResponse reads one response and discards its body. It returns nil for
// a 2xx response; an error wrapping errStatus for another complete response;
// one wrapping errMalformed for a response it cannot parse or delimit (no
// Content-Length, any Transfer-Encoding) or one that closes the connection;
// io.EOF if the connection ends before the response and io.ErrUnexpectedEOF
// if it ends within.
func readResponse(r *bufio.Reader) error { return readResponseBody(r, nil) }

// readResponseBody is readResponse keeping a 2xx response's body in *body,
// unless body is nil: a body kept is at most maxLine bytes, and a longer
// one is errMalformed.
func readResponseBody(r *bufio.Reader, body *[]byte) error {
	for {
		h, err := readHead(r)
		if err != nil {
			return err
		}
		switch {
		case h.code == 101:
			return fmt.Errorf("%w: 101 Switching Protocols", errMalformed)
		case h.code < 200:
			continue // interim response: no body, the final one follows
		case h.code == 204 || h.code == 304:
			// No body, whatever the headers say.
		case h.length < 0:
			return fmt.Errorf("%w: status %d without Content-Length", errMalformed, h.code)
		case body != nil && h.code/100 == 2:
			if h.length > maxLine {
				return fmt.Errorf("%w: a body of %d bytes to keep, over %d", errMalformed, h.length, maxLine)
			}
			*body = make([]byte, h.length)
			if _, err := io.ReadFull(r, *body); err != nil {
				return unexpectedEOF(err)
			}
		default:
			if _, err := r.Discard(int(h.length)); err != nil {
				return unexpectedEOF(err)
			}
		}
		if h.code/100 != 2 {
			return fmt.Errorf("%w: %d", errStatus, h.code)
		}
		if h.close {
			return fmt.Errorf("%w: the server closes the connection", errMalformed)
		}
		return nil
	}
}

// head is what readResponse needs of a status line and headers.
type head struct {
	code   int
	length int64 // Content-Length, or -1
	close  bool  // the server closes the connection after this response
}

func readHead(r *bufio.Reader) (head, error) {
	h := head{length: -1}
	line, err := readLine(r)
	if err != nil {
		return h, err
	}
	minor, code, ok := parseStatusLine(line)
	if !ok {
		return h, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	h.code = code
	var closeTok, keepAliveTok bool
	for n := 0; ; n++ {
		line, err := readLine(r)
		if err != nil {
			return h, unexpectedEOF(err)
		}
		if len(line) == 0 {
			break
		}
		if n == maxHeaders {
			return h, fmt.Errorf("%w: more than %d header lines", errMalformed, maxHeaders)
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(name) == 0 || bytes.ContainsAny(name, " \t") {
			return h, fmt.Errorf("%w: header line %q", errMalformed, line)
		}
		value = bytes.Trim(value, " \t")
		switch {
		case equalFoldASCII(name, "Content-Length"):
			n, ok := parseLength(value)
			if !ok || (h.length >= 0 && n != h.length) {
				return h, fmt.Errorf("%w: Content-Length %q", errMalformed, value)
			}
			h.length = n
		case equalFoldASCII(name, "Transfer-Encoding"):
			return h, fmt.Errorf("%w: Transfer-Encoding %q not supported", errMalformed, value)
		case equalFoldASCII(name, "Connection"):
			for tok := range bytes.SplitSeq(value, []byte(",")) {
				tok = bytes.Trim(tok, " \t")
				closeTok = closeTok || equalFoldASCII(tok, "close")
				keepAliveTok = keepAliveTok || equalFoldASCII(tok, "keep-alive")
			}
		}
	}
	h.close = closeTok || (minor == 0 && !keepAliveTok)
	return h, nil
}

// readLine returns the next line without its CRLF (or bare LF). The line is
// valid until the next read from r.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, fmt.Errorf("%w: line longer than %d bytes", errMalformed, r.Size())
	case err == io.EOF && len(line) > 0:
		return nil, io.ErrUnexpectedEOF
	case err != nil:
		return nil, err
	}
	return bytes.TrimSuffix(line[:len(line)-1], []byte("\r")), nil
}

// parseStatusLine parses "HTTP/1.x DDD[ reason]".
func parseStatusLine(line []byte) (minor, code int, ok bool) {
	if len(line) < len("HTTP/1.1 200") || !bytes.HasPrefix(line, []byte("HTTP/1.")) ||
		line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return 0, 0, false
	}
	switch line[7] {
	case '0':
		minor = 0
	case '1':
		minor = 1
	default:
		return 0, 0, false
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return 0, 0, false
		}
		code = code*10 + int(c-'0')
	}
	return minor, code, code >= 100
}

// parseLength parses a Content-Length value: decimal digits only.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// equalFoldASCII is bytes.EqualFold without Unicode folding, under which
// the Kelvin sign would match 'k'.
func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i, c := range b {
		if lower(c) != lower(s[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
