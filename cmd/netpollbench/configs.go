package main

import (
	"fmt"
	"slices"
	"strings"
)

// server is one configuration under test: a server binary and its flags.
// Every server speaks the echoserver contract: -addr, -lifetime, and a first
// stdout line "echoserver listening on ADDR (LABELS)".
type server struct {
	name  string   // short name for -configs: net, et, gnet, c, ...
	label string   // benchmark labels, key=value joined by '/'
	bin   string   // binary: echoserver, gnetecho, nbioecho, cloudwegoecho, cref
	args  []string // flags besides -addr and -lifetime
}

// servers are all the configurations netpollbench knows, in table order.
var servers = []server{
	{"net", "cfg=net/impl=net", "echoserver", []string{"-impl", "net"}},
	{"et", "cfg=et/impl=netpoll/mode=et/spin=0", "echoserver", []string{"-impl", "netpoll", "-mode", "et", "-spin", "0"}},
	{"oneshot", "cfg=oneshot/impl=netpoll/mode=oneshot/spin=0", "echoserver", []string{"-impl", "netpoll", "-mode", "oneshot", "-spin", "0"}},
	{"lt", "cfg=lt/impl=netpoll/mode=lt/spin=0", "echoserver", []string{"-impl", "netpoll", "-mode", "lt", "-spin", "0"}},
	{"spin", "cfg=spin/impl=netpoll/mode=et/spin=forever", "echoserver", []string{"-impl", "netpoll", "-spin", "forever"}},
	{"auto", "cfg=auto/impl=netpoll/mode=et/spin=auto", "echoserver", []string{"-impl", "netpoll", "-spin", "auto"}},
	// Short-read skipping off (it is on in every netpoll configuration above).
	{"et-noskip", "cfg=et-noskip/impl=netpoll/mode=et/spin=0/shortread=off", "echoserver", []string{"-impl", "netpoll", "-mode", "et", "-spin", "0", "-shortread", "off"}},
	{"auto-noskip", "cfg=auto-noskip/impl=netpoll/mode=et/spin=auto/shortread=off", "echoserver", []string{"-impl", "netpoll", "-spin", "auto", "-shortread", "off"}},
	{"gnet", "cfg=gnet/impl=gnet", "gnetecho", nil},
	{"nbio", "cfg=nbio/impl=nbio", "nbioecho", nil},
	{"cloudwego", "cfg=cloudwego/impl=cloudwego", "cloudwegoecho", nil},
	{"c", "cfg=c/impl=c-epoll-et", "cref", nil},
}

var (
	defaultConfigs = []string{"net", "et", "oneshot", "spin", "auto", "gnet", "nbio", "cloudwego", "c"}
	fullConfigs    = []string{"net", "et", "oneshot", "lt", "spin", "auto", "gnet", "nbio", "cloudwego", "c"}
)

// pickServers resolves a comma-separated list of names.
func pickServers(names []string) ([]server, error) {
	var out []server
	for _, n := range names {
		i := slices.IndexFunc(servers, func(s server) bool { return s.name == n })
		if i < 0 {
			var known []string
			for _, s := range servers {
				known = append(known, s.name)
			}
			return nil, fmt.Errorf("unknown configuration %q: known are %s", n, strings.Join(known, ", "))
		}
		out = append(out, servers[i])
	}
	return out, nil
}

// cell is one load shape: connections, message size, and the total rate of
// an open loop (requests/s; 0 runs a closed loop).
type cell struct {
	conns, size int
	rate        float64
}

func (c cell) String() string {
	if c.rate > 0 {
		return fmt.Sprintf("conns=%d/size=%d/rate=%s", c.conns, c.size, rateLabel(c.rate))
	}
	return fmt.Sprintf("conns=%d/size=%d", c.conns, c.size)
}
