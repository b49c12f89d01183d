module github.com/edgepoll/edgepoll

go 1.26.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.2.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
