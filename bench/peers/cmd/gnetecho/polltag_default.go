//go:build !poll_opt

package main

// pollOpt reports whether gnet was built with its poll_opt tag, the
// optimized poller gnet's own echo benchmark builds with
// (go build -tags=poll_opt). It is a label, so results say which gnet ran.
const pollOpt = false
