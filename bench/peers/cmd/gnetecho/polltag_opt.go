//go:build poll_opt

package main

// pollOpt: see polltag_default.go.
const pollOpt = true
