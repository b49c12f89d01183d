package main

import (
	"fmt"
	"net"
	"time"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// A protoConn speaks the request protocol on one connection. send writes
// request seq; recv reads and checks the response to request seq. Servers
// answer in order, so recv is always called for the oldest request sent and
// not yet received.
type protoConn interface {
	send(seq uint64) error
	recv(seq uint64) error
}

const dialTimeout = 5 * time.Second

// dial opens connection i of the run.
func dial(cfg *config, i int) (net.Conn, protoConn, error) {
	c, err := net.DialTimeout("tcp", cfg.addr, dialTimeout)
	if err != nil {
		return nil, nil, err
	}
	var pc protoConn
	switch cfg.proto {
	case "echo":
		m := loadproto.Plain
		if i < cfg.blocked {
			m = loadproto.Delay
		}
		pc, err = newEchoConn(c, cfg.size, uint64(i), m)
	case "http":
		pc = newHTTPConn(c, cfg.addr, cfg.path)
	default:
		err = fmt.Errorf("unknown protocol %q", cfg.proto)
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, pc, nil
}

// dialAll opens the connections of the run. It returns those it opened
// even on failure, for closeAll.
func dialAll(cfg *config) ([]net.Conn, []protoConn, error) {
	conns := make([]net.Conn, 0, cfg.conns)
	pcs := make([]protoConn, 0, cfg.conns)
	for i := range cfg.conns {
		c, pc, err := dial(cfg, i)
		if err != nil {
			return conns, nil, fmt.Errorf("connection %d: %w", i, err)
		}
		conns = append(conns, c)
		pcs = append(pcs, pc)
	}
	return conns, pcs, nil
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}
